# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/secret_scan.py, the check molecule/prometheus runs on the server role's -vvv --diff output (issue 22: a key
that reaches the output base64- or JSON-encoded was not found by a plain search)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import secret_scan  # noqa: E402  pylint: disable=wrong-import-position

KEY = "sk-live-7Hq2\"x'$(id)"
ENVIRON = "PATH=/usr/bin\0SGLANG_API_KEY=%s\0HOME=/root\0" % KEY


def _slurp_result(content):
    """What ansible prints at -vvv for a slurp of a file: JSON, the content base64."""
    return 'ok: [h] => {"changed": false, "content": "%s", "encoding": "base64", "source": "/proc/1/environ"}' % (
        base64.b64encode(content.encode()).decode())


def _forms():
    env_b64 = _slurp_result(ENVIRON)
    return {
        "raw": "TASK [x]\nok: [h] => {\"msg\": \"key is %s\"}" % KEY.replace('"', '\\"'),
        "json-escaped": json.dumps({"stdout": "SGLANG_API_KEY=%s\n" % KEY}),
        "base64 of environ": env_b64,
        "base64 cut short": _slurp_result(ENVIRON)[:-30],
        "base64 inside json inside base64": base64.b64encode(env_b64.encode()).decode(),
        "url-encoded": "GET http://h:30000/v1/models?key=" + "".join("%%%02X" % b for b in KEY.encode()),
        "urlsafe base64": base64.urlsafe_b64encode(("x" * 7 + KEY).encode()).decode(),
    }


@pytest.mark.parametrize("form", sorted(_forms()))
def test_found_in_every_form(form):
    text = "noise " * 50 + _forms()[form] + " more noise"
    hits, _decoded = secret_scan.scan(text, [KEY])
    assert hits, form
    # what is printed never holds the key itself
    assert all(KEY not in excerpt for _i, _p, excerpt in hits)


def test_nothing_found_in_output_that_holds_other_base64_and_json():
    text = "\n".join([
        _slurp_result("PATH=/usr/bin\0SGLANG_API_KEY=********\0"),
        json.dumps({"cmd": "systemctl show -p MainPID", "stdout": "MainPID=4242\n"}),
        "ESTABLISH LOCAL CONNECTION FOR USER: root",
        base64.b64encode(os.urandom(300)).decode(),
    ])
    hits, decoded = secret_scan.scan(text, [KEY, "another-secret-value"])
    assert hits == []
    assert decoded >= 2   # the slurp's base64 and the JSON string were decoded and searched


def test_the_command_line_exit_codes_and_the_key_never_printed():
    script = os.path.join(ROOT, "tests", "secret_scan.py")

    def run(text, keys):
        env = dict(os.environ, SECRET_SCAN_KEYS="\n".join(keys))
        return subprocess.run([sys.executable, script], input=text, env=env, capture_output=True, text=True,
                              check=False)

    found = run(_forms()["base64 of environ"], [KEY])
    assert found.returncode == 1 and "secret 0 found in output > " in found.stdout and "base64" in found.stdout
    assert KEY not in found.stdout
    clean = run("nothing here", [KEY])
    assert clean.returncode == 0 and "in none of 12 bytes" in clean.stdout
    assert run("x", []).returncode == 2
