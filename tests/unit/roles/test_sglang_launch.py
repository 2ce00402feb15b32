# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/server/files/sglang_launch.py: SGLang's launcher module run with its secrets masked in what it logs.

SGLang 0.5.9 logs server_args=ServerArgs(..., api_key='...') at start (engine.py: logger.info(f"{server_args=}"));
the launcher must keep the key out of that line, whichever way it reaches stdout/stderr, and hand the module
exactly the argv it would get under `python -m`."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

LAUNCH = os.path.join(ROOT, "roles", "server", "files", "sglang_launch.py")
FAKE = '''
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
log = logging.getLogger("sglang.srt.entrypoints.engine")
server_args = "ServerArgs(model_path='/m', api_key=" + repr(sys.argv[-1]) + ", admin_api_key='adm1n-secret', port=30000)"
log.info(f"server_args={server_args}")
log.warning("again %s", server_args)
print(server_args, flush=True)
sys.stderr.write(server_args + "\\n")
# SGLang 0.5.23: server_args={...} (entrypoints/engine.py _server_args_for_logging), and /server_info's launch_command
log.info("server_args=%r", {"model_path": "/m", "api_key": sys.argv[-1], "admin_api_key": "adm1n-secret"})
print({"launch_command": "python -m sglang.launch_server --api-key " + sys.argv[-1].replace(" ", "")}, flush=True)
print("cmdline: python -m sglang.launch_server --api-key " + sys.argv[-1] + " --port 30000", flush=True)
print("ARGV " + repr(sys.argv[1:]) + " NAME " + __name__, flush=True)
'''


@pytest.fixture(name="fake")
def _fake(tmp_path):
    (tmp_path / "fake_sglang_server.py").write_text(FAKE)
    return tmp_path


@pytest.mark.parametrize("key", ["molecule-secret-key", "with'quote", 'dq"x', "b\\s"])
def test_keys_are_masked_everywhere_and_argv_is_kept(fake, key):
    out = subprocess.run([sys.executable, LAUNCH, "-m", "fake_sglang_server", "--config", "/etc/sglang/x.yaml",
                          "--tp", "8", key],
                         env={"PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         check=True)
    text = "\n".join(line for line in (out.stdout + out.stderr).splitlines() if not line.startswith("ARGV "))
    assert key not in text and "adm1n-secret" not in text and repr(key)[1:-1] not in text
    assert len(re.findall(r"\(model_path='/m', api_key=(['\"])\*{8}\1", text)) == 4
    assert text.count("admin_api_key='********'") == 4
    assert len(re.findall(r"'api_key': (['\"])\*{8}\1", text)) == 1 and "'admin_api_key': '********'" in text
    assert "--api-key ********" in text and "--api-key ******** --port 30000" in text
    assert "ARGV %r NAME __main__" % (["--config", "/etc/sglang/x.yaml", "--tp", "8", key],) in out.stdout


def test_without_the_launcher_the_key_is_in_the_output(fake):
    """The stand-in for SGLang really prints the key: what the launcher hides is there without it."""
    out = subprocess.run([sys.executable, "-m", "fake_sglang_server", "molecule-secret-key"],
                         env={"PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         check=True, cwd=str(fake))
    assert "molecule-secret-key" in out.stdout + out.stderr


def test_usage_error():
    out = subprocess.run([sys.executable, LAUNCH, "sglang.launch_server"], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "usage" in out.stderr
