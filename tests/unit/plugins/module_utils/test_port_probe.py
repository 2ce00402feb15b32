# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_port_probe.py: whether a node reaches node 0's dist ports (issue 25), against real sockets
on this machine and, for the states a local socket cannot produce, the errors the kernel returns."""
from __future__ import annotations

import errno
import socket

from ansible_collections.gpuserve.sglang.plugins.module_utils import _port_probe


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_listening_port_is_open_and_a_closed_one_refused():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        open_port = listener.getsockname()[1]
        closed = _free_port()
        out = _port_probe.probe_all("127.0.0.1", [open_port, closed], timeout=10)
    finally:
        listener.close()
    assert out["ports"] == {open_port: "open", closed: "refused"}
    assert out["reachable"] and out["blocked"] == []


def _raising(exc):
    def connect(address, timeout):
        raise exc
    return connect


def test_a_dropped_packet_a_missing_route_and_an_unknown_name_are_blocked():
    assert _port_probe.probe("10.0.0.11", 50000, 2, _raising(socket.timeout("timed out")))[0] == "timeout"
    assert _port_probe.probe("10.0.0.11", 50000, 2, _raising(OSError(errno.ETIMEDOUT, "x")))[0] == "timeout"
    assert _port_probe.probe("10.0.0.11", 50000, 2, _raising(OSError(errno.EHOSTUNREACH, "No route")))[0] == "unreachable"
    assert _port_probe.probe("10.0.0.11", 50000, 2, _raising(OSError(errno.ENETUNREACH, "x")))[0] == "unreachable"
    assert _port_probe.probe("nope", 50000, 2, _raising(socket.gaierror(-2, "Name or service not known")))[0] == "unresolved"
    out = _port_probe.probe_all("10.0.0.11", [50000, 50001], 2, _raising(socket.timeout("timed out")))
    assert not out["reachable"] and out["blocked"] == [50000, 50001]
    assert out["errors"] == {50000: "timed out", 50001: "timed out"}


def test_an_unresolvable_name_for_real():
    assert _port_probe.probe("gpuserve-no-such-host.invalid", 50000, 5)[0] == "unresolved"
