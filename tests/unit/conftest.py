# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the checkout importable as ansible_collections.gpuserve.sglang for unit tests."""
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpuserve", "sglang")
if not os.path.exists(LINK):
    subprocess.check_call([os.path.join(ROOT, "scripts", "collection-link.sh")])
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def run_play(tmp_path, play, extra_vars=()):
    """Run a playbook text on this machine (connection local, the checkout as gpuserve.sglang); extra_vars are
    -e arguments. Returns (return code, stdout + stderr). The timeout only stops a hung play: under make test the
    unit tests share two cores with three molecule scenarios, and a play of six `due` rounds took more than
    300 s there (49 s alone)."""
    path = tmp_path / "play.yml"
    path.write_text(play)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable, str(path)]
    for item in extra_vars:
        cmd += ["-e", item]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def fake_nvidia_smi(tmp_path, query_gpu, apps, table=""):
    """An nvidia-smi test double in tmp_path/bin that prints the given texts (real captures where the test has
    them): --query-gpu=..., --query-compute-apps=..., and the plain table; any other call exits 3."""
    data = tmp_path / "smi-data"
    data.mkdir()
    (data / "query-gpu").write_text(query_gpu)
    (data / "apps").write_text(apps)
    (data / "table").write_text(table)
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir(exist_ok=True)
    script.write_text(
        "#!/bin/sh\n"
        "case \"$1\" in\n"
        "  --query-gpu=*) cat %(d)s/query-gpu ;;\n"
        "  --query-compute-apps=*) cat %(d)s/apps ;;\n"
        "  '') cat %(d)s/table ;;\n"
        "  *) exit 3 ;;\n"
        "esac\n" % {"d": data})
    script.chmod(0o755)
    return script


STANDIN = os.path.join(ROOT, "tests", "standin", "sglang_standin.py")


def free_port():
    """A local TCP port that was free a moment ago."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@contextlib.contextmanager
def standin_server(args=(), env=None):
    """The stand-in SGLang server (tests/standin, a test fixture) on a free local port, until /health answers 200;
    yields its base URL and stops it afterwards."""
    port = free_port()
    environ = dict(os.environ, STANDIN_LOAD_SECONDS="0.2", STANDIN_WARMUP_SECONDS="0.1")
    environ.update(env or {})
    proc = subprocess.Popen([sys.executable, STANDIN, "--port", str(port)] + list(args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environ)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = "http://127.0.0.1:%d" % port
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if opener.open(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait()
