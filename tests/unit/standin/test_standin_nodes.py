# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in (a test fixture) as one server over two hosts (issue 25): --nnodes/--node-rank/--dist-init-addr.
Node 0 waits for the other node at its dist port before loading; node 1 prints only its own global TP ranks' lines,
no ready line, and serves a constant-200 health server and nothing else; node 0's clean end stops node 1 where the
release broadcasts it (0.5.23), SIGTERM ends node 1 at once where it does not (0.5.9); a node that goes away ends
the other; a second node 0 on the same dist port cannot listen."""
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import LogWatch
from conftest import STANDIN, free_port, until

BOUND = 60      # hang guards only: every wait below polls a condition


def start(args, release="0.5.23", **env):
    full = dict(os.environ, STANDIN_LOAD_SECONDS="0.6", STANDIN_WARMUP_SECONDS="0.3", STANDIN_SGLANG_RELEASE=release)
    full.update({k: str(v) for k, v in env.items()})
    return subprocess.Popen([sys.executable, STANDIN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=full)


def node(rank, port, dist, release="0.5.23", **env):
    return start(["--tp", "4", "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", "127.0.0.1:%d" % dist,
                  "--port", str(port), "--enable-hierarchical-cache", "--hicache-ratio", "2"], release, **env)


def get(port, path="/health"):
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=2).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def end(*procs):
    """Whatever a test left running is killed and reaped."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=BOUND)


def read(lines):
    watch = LogWatch()
    for line in lines:
        watch.feed(line)
    return watch


def test_two_nodes_form_one_server_and_node_0_ends_both():
    dist, port0, port1 = free_port(), free_port(), free_port()
    follower = node(1, port1, dist, STANDIN_DRAIN_SECONDS="0.5")
    time.sleep(0.3)
    assert get(port1) is None                       # nothing listens while node 0 is missing
    leader = node(0, port0, dist, STANDIN_DRAIN_SECONDS="0.5")
    try:
        assert until(lambda: get(port0) == 200 and get(port1) == 200)
        assert get(port1, "/v1/models") == 404      # no API on node 1
        assert get(port1, "/health_generate") == 200
        assert get(port0, "/v1/models") == 200
        leader.send_signal(signal.SIGTERM)
        out0 = leader.communicate(timeout=BOUND)[0].splitlines()
        out1 = follower.communicate(timeout=BOUND)[0].splitlines()
    finally:
        end(leader, follower)
    assert follower.returncode == 0                 # node 0's shutdown broadcast ended it
    w0, w1 = read(out0), read(out1)
    assert w0.ready_line and w1.ready_line is None
    assert w0.hicache_summary(2, rank_ids=[0, 1])["ranks_missing"] == []
    assert w1.hicache_summary(2, rank_ids=[2, 3])["ranks_missing"] == []
    assert w1.hicache_summary(2, rank_ids=[2, 3])["ranks_seen"] == [2, 3]
    assert not any("max_total_num_tokens=" in line for line in out1)    # TP0's summary: node 0 only
    assert w0.fatal == [] and w1.fatal == []


def test_sigterm_on_node_1_waits_for_node_0_in_0_5_23_and_ends_it_in_0_5_9():
    for release in ("0.5.23", "0.5.9"):
        dist, port0, port1 = free_port(), free_port(), free_port()
        leader = node(0, port0, dist, release)
        follower = node(1, port1, dist, release)
        try:
            assert until(lambda: get(port0) == 200 and get(port1) == 200)
            follower.send_signal(signal.SIGTERM)
            if release == "0.5.23":
                assert until(lambda: follower.poll() is None and get(port1) == 200)
                time.sleep(0.5)
                assert follower.poll() is None and get(port0) == 200
                leader.send_signal(signal.SIGTERM)
                out1 = follower.communicate(timeout=BOUND)[0]
                assert "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast" in out1
                assert follower.returncode == 0
            else:
                follower.communicate(timeout=BOUND)
                assert follower.returncode == -signal.SIGTERM       # Python's default: no handler in 0.5.9
        finally:
            end(leader, follower)


def test_node_0_waits_for_the_other_node_and_says_so_when_it_does_not_come():
    dist, port0 = free_port(), free_port()
    leader = node(0, port0, dist, STANDIN_DIST_TIMEOUT="1")
    out = leader.communicate(timeout=BOUND)[0]
    assert leader.returncode == 1
    assert "Timed out after 1 seconds waiting for clients. 1/2 clients joined." in out
    assert "Load weight begin" not in out


def test_a_node_that_goes_away_ends_the_other():
    dist, port0, port1 = free_port(), free_port(), free_port()
    leader = node(0, port0, dist)
    follower = node(1, port1, dist)
    try:
        assert until(lambda: get(port0) == 200 and get(port1) == 200)
        leader.kill()                                # no shutdown broadcast: the group is broken
        out1 = follower.communicate(timeout=BOUND)[0]
        assert follower.returncode == -signal.SIGKILL   # SGLang's SIGQUIT path kills its own tree
        watch = read(out1.splitlines())
        assert watch.fatal and "node 0 of the group is gone" in out1
    finally:
        end(leader, follower)


def test_a_second_node_0_on_a_dist_port_in_use_cannot_listen():
    dist, port0, port0b, port1 = free_port(), free_port(), free_port(), free_port()
    leader = node(0, port0, dist)
    follower = node(1, port1, dist)
    try:
        assert until(lambda: get(port0) == 200)
        second = node(0, port0b, dist)
        out = second.communicate(timeout=BOUND)[0]
        assert second.returncode == 1 and "EADDRINUSE" in out
    finally:
        end(leader, follower)
