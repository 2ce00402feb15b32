# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's texts per release (issue 21): the table comes from the wheels' fixtures, and the watcher reads each
release with its own texts. The startup lines below are rendered from the table's templates (the texts each
release prints, taken from its wheel), never typed anew."""
import copy
import json
import os
import re
import string
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_logs as logs
from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_releases as release_tables
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES

from conftest import load_file
from test_service_runner import FakeHost, runner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
SCRIPT = os.path.join(ROOT, "scripts", "gen-sglang-texts.py")
STAMP = "2026-12-02 10:00:00"
KEY = "sk-live-0523-secret"


def gen():
    return load_file("gen_sglang_texts", SCRIPT)


class Fill(string.Formatter):
    def get_value(self, key, args, kwargs):
        return kwargs.get(key, "")

    def format_field(self, value, format_spec):
        return super().format_field(0 if value == "" and format_spec else value, format_spec)


def say(release, family, avoid=(), **values):
    for template in RELEASES[release]["texts"][family]:
        if not any(a in template for a in avoid):
            return Fill().format(template, **values)
    raise KeyError(family)


def startup(release, tp=8, ratio=4.0, draft=True, key=KEY, hicache_ranks=None):
    """(offset, line) of one start-up of that release: server_args with the key, KV (target + draft), the HiCache
    host pools (the draft's too where the release prints it), the ready line."""
    form = RELEASES[release]["server_args_form"]
    args = ("{'model_path': '/m', 'api_key': '%s', 'tp_size': %d}" % (key, tp) if form == "dict"
            else "ServerArgs(model_path='/m', api_key='%s', tp_size=%d)" % (key, tp))
    lines = [(0.2, "[%s] %s" % (STAMP, say(release, "server_args", args=args)))]
    tokens, kv_gb = 159277, 10.42
    host_tokens = int(tokens * ratio) + 1
    host_gb = round(host_tokens * 70272 / 1e9, 2)     # Kimi-K2.5's MLA cell: 70,272 bytes a token a rank
    for rank in range(tp):
        for gb in ([kv_gb, 0.17] if draft else [kv_gb]):
            text = say(release, "kv_pool", avoid=("k_gb",), tokens=tokens, gb=gb, pool="KV Cache", dtype="torch.bfloat16")
            lines.append((1.0, "[%s TP%d] %s" % (STAMP, rank, text)))
    lines.append((1.5, "[%s TP0] %s" % (STAMP, say(release, "max_total_num_tokens", tokens=tokens))))
    pools = [("kv", host_gb)]
    if draft and "{pool}" in RELEASES[release]["texts"]["hicache_host_pool"][-1]:
        pools.append(("draft", 0.73))   # releases that give the draft model a host pool of its own
    for rank in (range(tp) if hicache_ranks is None else hicache_ranks):
        for pool, gb in pools:
            text = say(release, "hicache_host_pool", avoid=("packed MTP",), gb=gb, pool=pool, tokens=host_tokens)
            lines.append((2.5, "[%s TP%d] %s" % (STAMP, rank, text)))
    lines.append((3.0, "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"))
    lines.append((4.0, "[%s] %s" % (STAMP, say(release, "ready"))))
    return {"lines": lines, "exit_at": None}


def feed(watch, script):
    for _offset, line in script["lines"]:
        watch.feed(line)
    return watch


# ---- the table and its fixtures -------------------------------------------------------------------------------
def test_the_table_is_what_the_fixtures_give_and_each_template_is_what_its_code_gives():
    proc = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    module = gen()
    fixtures = module.fixtures()
    assert sorted(fixtures) == sorted(RELEASES) and {"0.5.9", "0.5.23"} <= set(RELEASES)
    assert module.table_from(fixtures) == RELEASES
    for release, fixture in fixtures.items():
        assert re.match(r"^[0-9a-f]{64}$", fixture["sha256"])
        assert fixture["wheel"].startswith("sglang-%s-" % release) and fixture["wheel"].endswith(".whl")
        for family, hits in fixture["families"].items():
            assert family in module.FAMILIES
            for hit in hits:
                assert re.match(r"^sglang/srt/[\w/]+\.py:\d+$", hit["source"])
                assert module.template_of_code(hit["code"]) == hit["template"]


# every release from 0.5.9 to 0.5.23 on PyPI (pip index versions sglang, 2026-12-06; none yanked)
PYPI_RELEASES = ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1",
                 "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21",
                 "0.5.22", "0.5.23"]


def test_every_release_from_0_5_9_to_0_5_23_has_its_own_table_from_its_wheel():
    """Issue 40: 0.5.10 .. 0.5.22 were read with their neighbours' tables (the script stopped on them)."""
    assert sorted(RELEASES, key=logs._vkey) == PYPI_RELEASES
    fixtures = gen().fixtures()
    for release in PYPI_RELEASES:
        assert re.match(r"^sglang-%s-(py3-none-any|cp311-cp311-manylinux_2_34_x86_64)\.whl$" % re.escape(release),
                        fixtures[release]["wheel"])


@pytest.mark.parametrize("release,budget,sizing,draft_pool", [
    ("0.5.9", "each_rank_alone", "ratio_split", False),
    ("0.5.12.post1", "each_rank_alone", "ratio_split", False),
    ("0.5.13", "each_rank_alone", "joint_solve", False),
    ("0.5.16", "each_rank_alone", "joint_solve", False),
    ("0.5.17", "each_rank_alone", "joint_spec_solve", False),
    ("0.5.18", "each_rank_alone", "joint_spec_solve", True),
    ("0.5.19", "per_rank_share", "joint_spec_solve", True),
    ("0.5.23", "per_rank_share", "joint_spec_solve", True),
])
def test_the_rules_the_script_stopped_on_are_read_from_each_wheel(release, budget, sizing, draft_pool):
    rules = RELEASES[release]["rules"]
    assert (rules["hicache_budget"], rules["hybrid_mamba_sizing"]) == (budget, sizing)
    assert rules["hicache_draft_host_pool"] is draft_pool
    assert rules["hicache_reserve_bytes"] == 10 << 30 and rules["mamba_full_memory_ratio_default"] == 0.9


def test_every_release_names_the_values_the_collection_reads():
    """0.5.17+ passes the host pool's label as ``pool_label`` and 0.5.19-0.5.21 log ``server_args.resolved_dict()``:
    both were anonymous fields (the stand-in printed no label, the server_args line no arguments)."""
    for release, table in RELEASES.items():
        texts = table["texts"]
        assert all("{tokens" in t and ("{gb:" in t or "{k_gb:" in t) for t in texts["kv_pool"]), release
        assert all("{gb:" in t for t in texts["hicache_host_pool"]), release
        assert all("{pool}" in t and "{tokens:d}" in t for t in texts["hicache_host_pool"] if "KV host pool" in t)
        assert texts["server_args"] == ["server_args={args}"], release
        assert all("{mem_gb:" in t for t in texts["load_weight_end"]), release
    assert [RELEASES[r]["server_args_form"] for r in ("0.5.18", "0.5.19", "0.5.21", "0.5.22")] == \
        ["repr", "dict", "dict", "dict"]


def test_the_rule_detectors_read_each_form_sglang_wrote():
    module = gen()
    # 0.5.9: ten_gb; 0.5.11+: the module constant; 0.5.19+: divided by the ranks on the host
    assert module._hicache_budget("x = 1\navailable = host_mem.available - ten_gb\n") == ("each_rank_alone", 2)
    assert module._hicache_budget("available_bytes = host_mem.available - HICACHE_HOST_MEMORY_RESERVE_BYTES\n")[0] == \
        "each_rank_alone"
    assert module._hicache_budget("b = (avail - R) // ranks_per_host()\n")[0] == "per_rank_share"
    assert module._hicache_budget("available = host_mem.total\n") == (None, None)
    assert module._hybrid_mamba_sizing("s = int(mamba_budget_bytes // (per_req * (1 + D / ratio)))\n")[0] == "joint_solve"
    assert module._hybrid_mamba_sizing("s = int((mamba_budget_bytes - per_req * (1 + D)) // x)\n")[0] == \
        "joint_spec_solve"
    assert module._hybrid_mamba_sizing("mamba_state_intermediate_size = 0\n")[0] == "ratio_split"


def test_server_fields_reads_the_three_ways_sglang_declares_a_default():
    module = gen()
    source = ("@dataclass\nclass ServerArgs:\n    tp_size: int = 1\n    mem_fraction_static: Optional[float] = None\n"
              "    hicache_ratio: A[float, 'help'] = 2.0\n"
              "    mamba_full_memory_ratio: A[Optional[float], Arg(help='x', resolvable=True, fallback=0.9)] = None\n"
              "    ids: List[int] = field(default_factory=list)\n"
              "class Other:\n    tp_size: int = 8\n")
    fields = module.server_fields(source, ("ServerArgs",))
    assert fields["tp_size"] == {"value": 1, "line": 3} and fields["mem_fraction_static"]["value"] is None
    assert fields["hicache_ratio"]["value"] == 2.0
    assert fields["mamba_full_memory_ratio"] == {"value": None, "fallback": 0.9, "line": 6}
    assert "expr" in fields["ids"] and "value" not in fields["ids"]
    assert module._field_default(source, "mamba_full_memory_ratio") == (0.9, 6)


def test_a_table_that_disagrees_with_its_fixture_is_found(tmp_path):
    module = gen()
    fixtures = copy.deepcopy(module.fixtures())
    fixtures["0.5.23"]["families"]["ready"][0]["template"] = "The server is ready!"
    assert module.render_table(module.table_from(fixtures)) != open(module.TABLE).read()
    # and a fixture whose template is not what its code gives is named by --check's logic
    hit = fixtures["0.5.23"]["families"]["ready"][0]
    assert module.template_of_code(hit["code"]) != hit["template"]


def test_every_required_family_is_in_every_release():
    module = gen()
    required = [name for name, (req, _files, _anchor, _what) in module.FAMILIES.items() if req]
    for release, table in RELEASES.items():
        missing = [name for name in required if name not in table["texts"]]
        assert not missing, (release, missing)


def test_the_generator_reads_fstrings_percent_formats_asserts_and_assigned_messages():
    module = gen()
    found = module.find('logger.info("Allocating %s pool: %d tokens, %.2f GB host memory.", self.pool_label, '
                        'self.size, requested_bytes / 1e9)\n', "GB host memory")
    assert found[0][2] == "Allocating {pool} pool: {tokens:d} tokens, {gb:.2f} GB host memory."
    found = module.find('x = f"{a!r} Rank {i} is dead {{x}}"\n', "is dead")
    assert found[0][2] == "{a} Rank {rank} is dead {{x}}"
    found = module.find('assert y > 1, "The host memory should be larger"\n', "should be larger")
    assert found[0][2] == "The host memory should be larger"
    found = module.find("log(f\"{n} {'VA upper bound' if self.post_capture_active else 'is allocated'}. #tokens: "
                        "{num_tokens}\")\n", "#tokens: {")
    assert found[0][2] == "{n} is allocated. #tokens: {tokens}"


# ---- SGLang's defaults (issue 39: one table, from each wheel) -------------------------------------------------


def test_server_defaults_are_each_release_s_serverargs():
    for release in PYPI_RELEASES:
        defaults = release_tables.server_defaults(release)
        assert defaults["tp_size"] == 1 and defaults["pp_size"] == 1 and defaults["dp_size"] == 1
        assert defaults["enable_hierarchical_cache"] is False and defaults["disable_radix_cache"] is False
        assert defaults["mem_fraction_static"] is None      # computed at start-up from the GPU's memory
        assert defaults["hicache_write_policy"] == "write_through" and defaults["hicache_io_backend"] == "kernel"
        assert defaults["speculative_algorithm"] is None and defaults["port"] == 30000
    # the ratio: 2.0 as declared up to 0.5.17; from 0.5.18 None (chosen at start-up, auto-sized from 0.5.21)
    assert release_tables.server_default("hicache_ratio", "0.5.17") == 2.0
    assert release_tables.server_default("hicache_ratio", "0.5.18") is None
    assert release_tables.server_default("hicache_mem_layout", "0.5.13") == "layer_first"
    assert release_tables.server_default("hicache_mem_layout", "0.5.14") == "page_first"
    assert "hicache_host_memory_fraction" not in release_tables.server_defaults("0.5.20")
    assert release_tables.server_default("hicache_host_memory_fraction", "0.5.21") == 0.8
    # each value is what the fixture recorded from the wheel, with its file:line
    fixture = gen().fixtures()["0.5.17"]["defaults"]["tp_size"]
    assert fixture["value"] == 1 and re.match(r"^sglang/srt/server_args\.py:\d+$", fixture["source"])


def test_server_defaults_of_a_release_without_a_table_or_none():
    assert release_tables.release_for_defaults("0.5.17") == ("0.5.17", "SGLang 0.5.17's defaults (from its wheel)")
    assert release_tables.release_for_defaults("0.5.17.post2")[0] == "0.5.17"
    assert release_tables.release_for_defaults("0.5.1")[0] == "0.5.9"
    assert release_tables.release_for_defaults("0.6.0")[0] == "0.5.23"
    assert release_tables.release_for_defaults(None)[0] == "0.5.23" and release_tables.release_for_defaults("")[0] == "0.5.23"
    copy_ = release_tables.server_defaults("0.5.9")
    copy_["tp_size"] = 8
    assert release_tables.server_default("tp_size", "0.5.9") == 1
    with pytest.raises(KeyError):
        release_tables.server_default("no_such_field")


def test_the_consumers_read_the_table_for_what_the_command_line_does_not_say(monkeypatch):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import _systemd
    from ansible_collections.gpuserve.sglang.plugins.filter import sglang_nodes
    facts = _systemd.exec_start_facts(["python", "-m", "sglang.launch_server", "--model-path", "/m"])
    assert _systemd.scheduler_count(facts) == 1 and _systemd.node_scheduler_count(facts) == 1
    assert sglang_nodes.sglang_node_fingerprint({"sglang_release": "0.5.17"}, "p", {})["tp"] == "1"
    # the value comes from the table, not a literal: a table saying 2 makes both say 2
    for release in RELEASES:
        monkeypatch.setitem(RELEASES[release]["defaults"], "tp_size", 2)
    assert _systemd.scheduler_count(facts) == 2
    assert sglang_nodes.sglang_node_fingerprint({"sglang_release": "0.5.17"}, "p", {})["tp"] == "2"


def test_0_5_13_to_0_5_16_hybrid_state_is_the_joint_solve_without_the_padding_slot():
    """0.5.13's handle_max_mamba_cache: slots = budget // (per_req (1 + D / ratio)), the scratch for
    min(running, slots // ratio) requests, no padding slot (0.5.17 added it)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp
    per_req, rest = 50 << 20, 40.0
    options = {"speculative_num_draft_tokens": 4, "max_running_requests": 64}
    rules, _note = mp.release_rules("0.5.13")
    left, facts = mp.hybrid_state(rules, rest, per_req, options)
    budget = rest * 0.9 / 1.9 * mp.GIB
    slots = int(budget // (per_req * (1 + 4 / 3.0)))
    assert facts["sizing"] == "joint_solve" and facts["state_slots"] == slots
    assert facts["spec_intermediate_bytes"] == per_req * min(64, slots // 3) * 4
    assert abs(left - (rest - (per_req * min(64, slots // 3) * 4 + slots * per_req) / float(mp.GIB))) < 1e-9
    assert "0.5.13" in facts["not_modelled"]
    _left, padded = mp.hybrid_state(mp.release_rules("0.5.17")[0], rest, per_req, options)
    assert padded["state_slots"] == int((budget - per_req * 5) // (per_req * (1 + 4 / 3.0)))
    _left, plain = mp.hybrid_state(rules, rest, per_req, {})
    assert plain["state_slots"] == int(budget // per_req) and plain["state_pool_bytes"] == plain["state_slots"] * per_req


# ---- reading a release ------------------------------------------------------------------------------------------
# SGLang 0.5.17's own lines on a lent H200 (2026-12-06, TP 1, --hicache-ratio 2 --max-total-tokens 131072), copied
# unedited from ../shared/reference/real-sglang-0.5.17-h200/serverA.log
REAL_0_5_17 = [
    "[2026-12-06 03:53:51] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 131072, K size: 0.13 GB, V size: "
    "0.13 GB",
    "[2026-12-06 03:54:58] Allocating kv hierarchical KV host pool: 262145 tokens, 0.54 GB host memory.",
    "[2026-12-06 03:55:28] The server is fired up and ready to roll!",
]


def test_the_real_0_5_17_host_pool_line_is_read_with_0_5_17_s_table_alone():
    texts = logs.texts_for("0.5.17")
    assert texts.info["tables"] == ["0.5.17"] and "note" not in texts.info
    watch = logs.LogWatch(texts=texts)
    for line in REAL_0_5_17:
        watch.feed(line)
    summary = watch.hicache_summary(1, ratio=2.0)
    assert summary["ranks_missing"] == [] and summary["host_pool_tokens_per_rank"] == 262145
    assert summary["host_pool_gb_per_rank"] == 0.54 and watch.hicache_unread == []
    assert watch.kv_summary()["tokens_per_rank"] == 131072 and watch.ready_line
    # 0.5.9's table does not know the line (what "read with 0.5.9's alone" meant)
    old = logs.LogWatch(texts=logs.texts_for("0.5.9"))
    for line in REAL_0_5_17:
        old.feed(line)
    assert old.hicache == {} and "262145 tokens" in old.hicache_unread[0]


def test_0523_lines_verify_hicache_on_every_rank_with_the_size_check_and_the_draft_pool_apart():
    watch = feed(logs.LogWatch(texts=logs.texts_for("0.5.23")), startup("0.5.23"))
    summary = watch.hicache_summary(8, ratio=4.0)
    assert summary["ranks_seen"] == list(range(8)) and summary["ranks_missing"] == []
    assert summary["host_pool_gb_per_rank"] == 44.77 and summary["draft_host_pool_gb_per_rank"] == 0.73
    assert summary["host_pool_tokens_per_rank"] == 637109
    assert summary["requested"]["off"] == [] and abs(summary["requested"]["expected_gb_min"] - 44.77) < 0.05
    kv = watch.kv_summary()
    assert kv["tokens_per_rank"] == 159277 and kv["gb_per_rank"] == 10.42 and kv["draft_gb_per_rank"] == 0.17
    assert kv["max_total_num_tokens"] == 159277 and watch.server_args_seen
    assert watch.ready_line.endswith("The server is fired up and ready to roll!")


def test_0523_lines_read_with_0_5_9s_texts_find_nothing_and_say_what_was_seen():
    """What today's main did with a healthy 0.5.23 server: 0 of 8 ranks (the defect this table fixes)."""
    watch = feed(logs.LogWatch(texts=logs.texts_for("0.5.9")), startup("0.5.23"))
    assert watch.hicache == {} and watch.kv == {}
    assert len(watch.hicache_unread) == 3 and "hierarchical KV host pool" in watch.hicache_unread[0]


def test_0_5_9_lines_still_verify_with_their_own_table_and_with_every_table():
    for texts in (logs.texts_for("0.5.9"), logs.ALL_TEXTS):
        watch = feed(logs.LogWatch(texts=texts), startup("0.5.9"))
        summary = watch.hicache_summary(8, ratio=4.0)
        assert summary["ranks_seen"] == list(range(8)) and summary["requested"]["off"] == []
        assert "draft_host_pool_gb_per_rank" not in summary
        assert watch.kv_summary()["draft_gb_per_rank"] == 0.17


@pytest.mark.parametrize("release,tables,note", [
    ("0.5.23", ["0.5.23"], None),
    ("0.5.9", ["0.5.9"], None),
    ("0.5.15", ["0.5.15"], None),
    ("0.5.17", ["0.5.17"], None),
    ("0.5.16.post1", ["0.5.16", "0.5.17"], "has no release table of its own"),
    ("0.6.1", ["0.5.23"], "newer than the newest release table (0.5.23)"),
    (None, PYPI_RELEASES, "not known"),
])
def test_which_table_reads_which_release(release, tables, note):
    info = logs.texts_for(release, "test").info
    assert info["tables"] == tables and info["release"] == release
    assert (note is None and "note" not in info) or note in info["note"]


@pytest.mark.parametrize("release,line", [
    ("0.5.23", "RuntimeError: Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 "
               "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."),
    ("0.5.23", "ValueError: No host memory is left for HiCache after the 10 GiB reserve; set --hicache-ratio or "
               "--hicache-size explicitly."),
    ("0.5.23", "sglang: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
               "--cuda-graph-max-bs-prefill"),
    ("0.5.23", "ValueError: Not enough host memory available. Requesting 44.77 GB but only have 30.02 GB free."),
    ("0.5.9", "[%s] Rank 2 scheduler is dead. Please check if there are relevant logs." % STAMP),
    ("0.5.9", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
              "self.server_args.mem_fraction_static=0.95"),
])
def test_each_release_fatal_texts_are_fatal(release, line):
    watch = logs.LogWatch(texts=logs.texts_for(release))
    watch.feed(line)
    assert watch.failed_line == line


def test_installed_release_reads_importlib_metadata_and_refuses_odd_answers():
    seen = []

    def run(argv):
        seen.append(argv)
        return 0, "0.5.23\n"
    assert logs.installed_release("/opt/sglang/venv/bin/python", run=run) == "0.5.23"
    assert seen[0][:3] == ["/opt/sglang/venv/bin/python", "-I", "-c"] and "import sglang" not in seen[0][3]
    assert logs.installed_release("/x/python", run=lambda argv: (0, "\n")) is None
    assert logs.installed_release("/x/python", run=lambda argv: (1, "0.5.23\n")) is None
    assert logs.installed_release("/x/python", run=lambda argv: (0, "0.5.23; rm -rf /\n")) is None
    assert logs.installed_release("/nonexistent/python") is None
    # the real probe on this interpreter (no sglang here): None, not an exception
    assert logs.installed_release(sys.executable) in (None,) or re.match(r"^\d", logs.installed_release(sys.executable))


# ---- through the module's state machine ---------------------------------------------------------------------
def test_a_healthy_0_5_23_server_verifies_through_the_runner_with_its_key_in_no_returned_line():
    host = FakeHost([startup("0.5.23"), startup("0.5.23")], drain=1.0, release="0.5.23",
                    exec_start="/opt/sglang/venv/bin/python -m sglang.launch_server --tp 8 "
                               "--enable-hierarchical-cache --hicache-ratio 4 --api-key " + KEY)
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert res["sglang_texts"]["release"] == "0.5.23" and res["sglang_texts"]["tables"] == ["0.5.23"]
    assert "importlib.metadata of /opt/sglang/venv/bin/python" == res["sglang_texts"]["how"]
    assert res["hicache"]["ranks_seen"] == list(range(8)) and res["hicache"]["requested"]["off"] == []
    assert KEY not in json.dumps(res)


def test_a_0_5_23_server_read_as_0_5_9_fails_naming_the_family_the_release_and_what_was_seen():
    host = FakeHost([startup("0.5.23"), startup("0.5.23")], drain=1.0, release="0.5.23",
                    exec_start="/opt/sglang/venv/bin/python -m sglang.launch_server --tp 8 "
                               "--enable-hierarchical-cache --hicache-ratio 4 --api-key " + KEY)
    ok, res = runner(host, state="restarted", release="0.5.9").execute()
    assert not ok
    msg = res["msg"]
    assert "0 of 8" in msg and "hicache_host_pool" in msg and "SGLang 0.5.9" in msg
    assert "seen instead" in msg and "Allocating kv hierarchical KV host pool: 637109 tokens" in msg
    assert KEY not in json.dumps(res)


def test_a_release_newer_than_every_table_is_read_with_the_newest_and_said_so():
    host = FakeHost([startup("0.5.23"), startup("0.5.23")], drain=1.0, release="0.5.31",
                    exec_start="/opt/sglang/venv/bin/python -m sglang.launch_server --tp 8 "
                               "--enable-hierarchical-cache --hicache-ratio 4")
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert res["sglang_texts"]["tables"] == ["0.5.23"] and "newer than the newest" in res["sglang_texts"]["note"]


def test_the_stand_in_speaks_the_release_it_is_told_with_the_table_s_texts():
    """The stand-in (a test fixture) renders the same table: its 0.5.23 start-up verifies with 0.5.23's texts and
    not with 0.5.9's."""
    from conftest import STANDIN
    env = dict(os.environ, STANDIN_SGLANG_RELEASE="0.5.23", STANDIN_LOAD_SECONDS="0.2",
               STANDIN_WARMUP_SECONDS="0.1", STANDIN_FAIL="host_memory")
    proc = subprocess.run([sys.executable, STANDIN, "--tp", "2", "--enable-hierarchical-cache", "--hicache-ratio",
                           "4", "--port", "1", "--api-key", KEY], capture_output=True, text=True, timeout=60, env=env,
                          check=False)
    out = proc.stdout + proc.stderr
    assert "server_args={'model_path'" in out and "'api_key': '%s'" % KEY in out   # the launcher masks it
    watch = logs.LogWatch(texts=logs.texts_for("0.5.23"))
    for line in out.splitlines():
        watch.feed(line)
    assert "Not enough host memory available. Requesting 44.77 GB" in watch.failed_line
    assert watch.kv_summary()["ranks"] == [0, 1]
