# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Can this host reach TCP ports of another one (issue 25: a multi-node server's nodes must reach node 0's dist
port and the five after it before anything stops)? One TCP connect per port:

- open        something listens (node 0's running server holds them);
- refused     the host answered with a reset: the path is open, nothing listens yet (a server not started);
- timeout     no answer within the bound: a firewall drops the packets - the ranks would hang in their start-up;
- unreachable no route to the host or network;
- unresolved  the name does not resolve here.

The first two are reachable. Standard library only; `connect` is injectable for tests."""
from __future__ import annotations

import errno
import socket

REACHABLE = ("open", "refused")


def probe(host, port, timeout=5.0, connect=socket.create_connection):
    """The state of one port (see the module docstring) and the error text, if any."""
    try:
        conn = connect((host, port), timeout)
    except ConnectionRefusedError as exc:
        return "refused", str(exc)
    except socket.gaierror as exc:
        return "unresolved", str(exc)
    except socket.timeout as exc:
        return "timeout", str(exc) or "timed out after %s s" % timeout
    except OSError as exc:
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL):
            return "unreachable", str(exc)
        if exc.errno == errno.ETIMEDOUT:
            return "timeout", str(exc)
        return "error", str(exc)
    try:
        conn.close()
    except OSError:
        pass
    return "open", ""


def probe_all(host, ports, timeout=5.0, connect=socket.create_connection):
    """{"ports": {port: state}, "errors": {port: text}, "reachable": bool, "blocked": [ports not reachable]}."""
    states, errors = {}, {}
    for port in ports:
        state, text = probe(host, int(port), timeout, connect)
        states[int(port)] = state
        if text:
            errors[int(port)] = text
    blocked = [p for p, s in states.items() if s not in REACHABLE]
    return {"ports": states, "errors": errors, "reachable": not blocked, "blocked": blocked}
