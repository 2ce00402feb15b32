# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in speaks what the REAL SGLang server printed (issue 40): the real 0.5.17 server's logs
(tests/fixtures/sglang/real/0.5.17-h200/, a plain process group on an H200) against the stand-in's own output.

The SIGTERM sequence (texts, order, exit status 137) is compared for every release the stand-in speaks: the texts
are the same in the 0.5.9, 0.5.17 and 0.5.23 wheels, except ``kill_process_tree called: ...``, which SGLang logs
from 0.5.13 on. The start-up texts are compared where the stand-in speaks the real server's release itself."""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import parse_tagged
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES
from conftest import STANDIN, free_port
from real_sglang_logs import server_log

REAL_RELEASE = "0.5.17"
SEQUENCE = ("SIGTERM received", "Gracefully exiting", "kill_process_tree called")


def messages(lines):
    """The messages of SGLang's own lines (prefix taken off), pids made one placeholder."""
    out = []
    for line in lines:
        tag, msg = parse_tagged(line)
        if tag is not None:
            out.append(re.sub(r"pid=\d+", "pid=P", msg))
    return out


def sigterm_sequence(lines):
    return [msg for msg in messages(lines) if msg.startswith(SEQUENCE)]


def standin_run(release, port):
    env = dict(os.environ, STANDIN_LOAD_SECONDS="0.3", STANDIN_WARMUP_SECONDS="0.3", STANDIN_SGLANG_RELEASE=release)
    proc = subprocess.Popen([sys.executable, STANDIN, "--model-path", "/tmp/tiny-llama", "--port", str(port),
                             "--enable-hierarchical-cache", "--hicache-ratio", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1).status == 200:
                break
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]     # a hang guard only
    return proc.returncode, out.splitlines()


def test_the_real_server_ended_with_this_sigterm_sequence_and_137():
    summary = "\n".join(server_log("summary.txt"))
    assert [int(code) for code in re.findall(r"main process exit status (\d+)", summary)] == [137] * 4
    for name in ("serverA.log", "serverB.log", "serverD.log"):
        seq = sigterm_sequence(server_log(name))
        assert seq == ["SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
                       "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].",
                       "kill_process_tree called: parent_pid=P, include_parent=True, pid=P"], name


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_standin_ends_as_the_real_server_did(release):
    """Old stand-in: 'signum=15 frame=<frame at ...>' and no kill_process_tree line."""
    code, lines = standin_run(release, free_port())
    assert code == -signal.SIGKILL                    # 128 + 9 = 137 in a shell and for systemd (status=9/KILL)
    real = sigterm_sequence(server_log("serverA.log"))
    key = tuple(int(x) if x.isdigit() else 0 for x in release.split("."))
    wanted = real if key >= (0, 5, 13) else real[:2]     # 0.5.12.post1's wheel: no kill_process_tree line yet
    assert sigterm_sequence(lines) == wanted
    own = [line for line in lines if "kill_process_tree called" in line]
    assert all(re.search(r"parent_pid=(\d+), include_parent=True, pid=\1$", line) for line in own)


def test_the_standin_speaks_the_real_start_up_texts_of_the_same_release():
    if REAL_RELEASE not in RELEASES:
        pytest.skip("the stand-in has no table for SGLang %s yet (tables: %s): the SIGTERM sequence is compared "
                    "above; the start-up texts once the table lands" % (REAL_RELEASE, ", ".join(sorted(RELEASES))))
    code, lines = standin_run(REAL_RELEASE, free_port())
    assert code == -signal.SIGKILL
    forms = ["KV Cache is allocated. dtype: ", "Allocating kv hierarchical KV host pool: ", "server_args=ServerArgs(",
             "The server is fired up and ready to roll!"]
    real = messages(server_log("serverA.log"))
    mine = messages(lines)

    def first(msgs, form):
        return next((index for index, msg in enumerate(msgs) if msg.startswith(form)), None)
    assert all(first(mine, form) is not None for form in forms), [form for form in forms if first(mine, form) is None]
    assert sorted(forms, key=lambda form: first(mine, form)) == sorted(forms, key=lambda form: first(real, form))
    pool = re.compile(r"^Allocating kv hierarchical KV host pool: \d+ tokens, \d+\.\d\d GB host memory\.$")
    assert pool.match(real[first(real, forms[1])]) and pool.match(mine[first(mine, forms[1])])
