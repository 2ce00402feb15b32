# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/server/files/sglang_textfile.py: the metrics the alert rules read, from systemd's properties and the
deployment record's JSON twin; the file is replaced atomically."""
from __future__ import annotations

import json
import os

from conftest import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
tf = load_file("sglang_textfile", os.path.join(ROOT, "roles", "server", "files", "sglang_textfile.py"))

UNIT = "sglang-kimi.service"
RECORD = {"invocation_id": "abc123", "hicache_expected": True, "hicache": {"ranks_seen": [0, 1]},
          "baseline": {"output_throughput": 759.3, "concurrency": 30}}
STATE = {"version": 1, "unit": UNIT, "invocation_id": "abc123", "hicache": {"ranks_seen": [0, 1]}}


def _samples(text):
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if not line.startswith("#")}


def test_verified_invocation_and_baseline():
    props = {"NRestarts": "2", "ActiveState": "active", "InvocationID": "abc123"}
    samples = _samples(tf.render(UNIT, props, RECORD, STATE))
    assert samples['sglang_unit_restarts_total{unit="sglang-kimi.service"}'] == "2"
    assert samples['sglang_unit_active{unit="sglang-kimi.service"}'] == "1"
    assert samples['sglang_unit_invocation_info{unit="sglang-kimi.service",invocation_id="abc123"}'] == "1"
    assert samples['sglang_hicache_expected{unit="sglang-kimi.service"}'] == "1"
    assert samples['sglang_hicache_verified{unit="sglang-kimi.service"}'] == "1"
    assert samples['sglang_bench_baseline_output_tok_s{unit="sglang-kimi.service"}'] == "759.3"
    assert samples['sglang_bench_baseline_concurrency{unit="sglang-kimi.service"}'] == "30"


def test_another_invocation_is_not_verified():
    props = {"NRestarts": "3", "ActiveState": "active", "InvocationID": "def456"}  # systemd restarted it
    samples = _samples(tf.render(UNIT, props, RECORD, STATE))
    assert samples['sglang_hicache_verified{unit="sglang-kimi.service"}'] == "0"
    assert samples['sglang_hicache_expected{unit="sglang-kimi.service"}'] == "1"


def test_verified_is_the_state_files_answer_never_the_records(tmp_path):
    """Issue 47: the state file is the one record of which invocation is verified. A deployment record naming the
    running invocation (a record left by a run killed after it, or a twin written by hand) while the state file names
    another, or there is no state file, is not verified; the record still gives HiCache expected and the baseline."""
    props = {"NRestarts": "0", "ActiveState": "active", "InvocationID": "abc123"}
    other = dict(STATE, invocation_id="old999")
    (tmp_path / "sglang-kimi.service.json").write_text(json.dumps(other))
    for state in (tf.read_state(str(tmp_path), UNIT), tf.read_state("", UNIT), None):
        samples = _samples(tf.render(UNIT, props, RECORD, state))
        assert samples['sglang_hicache_verified{unit="sglang-kimi.service"}'] == "0", state
        assert samples['sglang_hicache_expected{unit="sglang-kimi.service"}'] == "1"
        assert samples['sglang_bench_baseline_output_tok_s{unit="sglang-kimi.service"}'] == "759.3"
    # the record names another invocation (a run killed before its recorder), the state file the running one
    stale = dict(RECORD, invocation_id="old999", hicache={})
    samples = _samples(tf.render(UNIT, props, stale, STATE))
    assert samples['sglang_hicache_verified{unit="sglang-kimi.service"}'] == "1"


def test_after_a_reboot_the_state_file_verified_the_running_invocation(tmp_path):
    """Issue 22: only a changing run rewrites the record, so after a reboot (or a crash systemd recovered) the alert
    stayed firing although verify.yml proved the new invocation. sglang_service's state file names it."""
    props = {"NRestarts": "0", "ActiveState": "active", "InvocationID": "def456"}
    (tmp_path / "sglang-kimi.service.json").write_text(
        '{"version": 1, "unit": "sglang-kimi.service", "invocation_id": "def456", "hicache": {"ranks_seen": [0, 1]}}')
    state = tf.read_state(str(tmp_path), UNIT)
    samples = _samples(tf.render(UNIT, props, RECORD, state))
    assert samples['sglang_hicache_verified{unit="sglang-kimi.service"}'] == "1"
    # a state file of another invocation, or one without HiCache, or none at all: not verified
    for other in ({"invocation_id": "abc999", "hicache": {"ranks_seen": [0]}},
                  {"invocation_id": "def456", "hicache": {"ranks_seen": []}}, {}):
        samples = _samples(tf.render(UNIT, props, RECORD, other))
        assert samples['sglang_hicache_verified{unit="sglang-kimi.service"}'] == "0", other
    assert tf.read_state(str(tmp_path / "none"), UNIT) == {}
    assert tf.read_state("", UNIT) == {}
    (tmp_path / "sglang-kimi.service.json").write_text("not json")
    assert tf.read_state(str(tmp_path), UNIT) == {}


def test_the_timer_unit_passes_the_state_directory_sglang_service_writes():
    import yaml  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import STATE_DIR
    with open(os.path.join(ROOT, "roles", "server", "tasks", "textfile.yml"), encoding="utf-8") as handle:
        text = handle.read()
    yaml.safe_load(text)
    # the service unit's text: in textfile.yml, or in the template it renders
    template = os.path.join(ROOT, "roles", "server", "templates", "sglang-textfile.service.j2")
    if "--state-dir" not in text and os.path.exists(template):
        with open(template, encoding="utf-8") as handle:
            text = handle.read()
    assert "--state-dir %s\n" % STATE_DIR in text


def test_no_record_no_baseline():
    samples = _samples(tf.render(UNIT, {"NRestarts": "0", "ActiveState": "failed", "InvocationID": ""}, {}))
    assert samples['sglang_unit_active{unit="sglang-kimi.service"}'] == "0"
    assert samples['sglang_hicache_verified{unit="sglang-kimi.service"}'] == "0"
    assert not any(k.startswith("sglang_bench_baseline") or k.startswith("sglang_unit_invocation_info")
                   for k in samples)


def test_file_replaced(tmp_path, monkeypatch):
    record = tmp_path / "r.json"
    record.write_text('{"invocation_id": "x"}')
    monkeypatch.setattr(tf, "systemd_properties", lambda unit: {"NRestarts": "1", "InvocationID": "x"})
    out = tmp_path / "sglang-kimi.prom"
    assert tf.main(["--unit", UNIT, "--record", str(record), "--out", str(out), "--state-dir", str(tmp_path)]) == 0
    assert 'sglang_unit_restarts_total{unit="sglang-kimi.service"} 1' in out.read_text()
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(str(tmp_path))) == ["r.json", "sglang-kimi.prom"]
