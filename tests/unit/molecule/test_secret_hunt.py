# SPDX-License-Identifier: GPL-3.0-or-later
"""The secret hunt's host side (molecule/_shared/secret_hunt.py, a test fixture): a canary outside its own files is
named with the place (never the value), its own file must hold it and be unreadable by others, and the counts say
what was searched (the task file fails on zero)."""
import base64
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
HUNT = os.path.join(ROOT, "molecule", "_shared", "secret_hunt.py")
CANARY = "Zq7-hunt-canary-5151"


def hunt(tmp_path, allowed):
    spec = {"canaries": [{"name": "token", "value": CANARY, "allowed": allowed}], "roots": [str(tmp_path / "root")]}
    proc = subprocess.run([sys.executable, HUNT], input=base64.b64encode(json.dumps(spec).encode()).decode(),
                          capture_output=True, text=True, check=True, timeout=120)
    assert CANARY not in proc.stdout and CANARY not in proc.stderr
    return json.loads(proc.stdout)


def test_a_canary_outside_its_own_file_is_named_by_its_place(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    own = root / "etc" / "own.env"
    own.write_text("HF_TOKEN=%s\n" % CANARY)
    own.chmod(0o600)
    (root / "etc" / "record.json").write_text('{"x": "%s"}' % CANARY)
    out = hunt(tmp_path, [str(own)])
    assert out["findings"] == ["file %s (mode 644): token" % (root / "etc" / "record.json")]
    assert out["own_files"] == {"token": ["%s (600)" % own]}
    assert out["searched"]["files"] == 2 and out["searched"]["processes"] > 0


def test_an_own_file_readable_by_others_or_without_the_value_is_a_finding(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    own = root / "own.env"
    own.write_text("HF_TOKEN=%s\n" % CANARY)
    own.chmod(0o644)
    assert hunt(tmp_path, [str(own)])["findings"][0].startswith("file %s (mode 644)" % own)
    own.write_text("HF_TOKEN=other\n")
    assert "in none of its own files" in hunt(tmp_path, [str(own)])["findings"][0]
