# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployment record and its JSON twin as one unit (plugins/module_utils/_record.py; issue 22)."""
import json
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _record
from ansible_collections.gpuserve.sglang.plugins.module_utils._record import record_json, write_record


@pytest.fixture
def paths(tmp_path):
    return {"md_path": str(tmp_path / "sglang-kimi.md"), "json_path": str(tmp_path / "sglang-kimi.json"),
            "history_dir": str(tmp_path / "history"), "service": "sglang-kimi"}


def write(paths, md, data, keep=10, **kw):
    return write_record(paths["md_path"], paths["json_path"], md, data, paths["history_dir"], paths["service"], keep,
                        **kw)


def test_writes_both_then_changes_nothing_when_equal(paths):
    first = write(paths, "# record 1\n", {"invocation_id": "a"})
    assert first["changed"] and first["history"] == [] and first["missing_previous"] == []
    assert open(paths["md_path"]).read() == "# record 1\n"
    assert json.load(open(paths["json_path"])) == {"invocation_id": "a"}
    assert oct(os.stat(paths["md_path"]).st_mode & 0o777) == "0o640"
    assert write(paths, "# record 1\n", {"invocation_id": "a"})["changed"] is False
    assert sorted(os.listdir(os.path.dirname(paths["md_path"]))) == ["sglang-kimi.json", "sglang-kimi.md"]


def test_the_replaced_pair_goes_to_the_history_by_the_hosts_clock_with_a_unique_suffix(paths):
    write(paths, "# one\n", {"n": 1})

    def clock():                          # the host's clock, not the controller's
        return 1796300000.0

    second = write(paths, "# two\n", {"n": 2}, now=clock, unique="abc123")
    base = os.path.join(paths["history_dir"], "sglang-kimi-20261203T121320Z-abc123")
    assert second["history"] == [base + ".md", base + ".json"]
    assert open(base + ".md").read() == "# one\n" and json.load(open(base + ".json")) == {"n": 1}
    # a second run within the same second (or another controller) never overwrites the first copy
    third = write(paths, "# three\n", {"n": 3}, now=clock)
    assert len(os.listdir(paths["history_dir"])) == 4 and third["history"][0] != base + ".md"


def test_a_missing_markdown_record_is_reported_not_fatal(paths):
    """Old tasks: the history copy needed both files; one missing .md failed every later run after its verify."""
    write(paths, "# one\n", {"n": 1})
    os.unlink(paths["md_path"])
    result = write(paths, "# two\n", {"n": 2})
    assert result["missing_previous"] == [paths["md_path"]]
    assert [p.endswith(".json") for p in result["history"]] == [True]
    assert open(paths["md_path"]).read() == "# two\n"


def test_history_keeps_the_newest_pairs_by_modification_time(paths):
    os.makedirs(paths["history_dir"])
    # an old-style name from the tasks before, and names whose order by name is not their order by time
    for index, base in enumerate(["sglang-kimi-20991231T000000Z-ffffff", "sglang-kimi-20261201T101010Z",
                                  "sglang-kimi-20000101T000000Z-000000"]):
        for ext in ("md", "json"):
            path = os.path.join(paths["history_dir"], "%s.%s" % (base, ext))
            open(path, "w").close()
            os.utime(path, (1000 + index, 1000 + index))
    open(os.path.join(paths["history_dir"], "other-unit-20261201T101010Z.json"), "w").close()
    write(paths, "# one\n", {"n": 1})
    result = write(paths, "# two\n", {"n": 2}, keep=2)
    left = sorted(os.listdir(paths["history_dir"]))
    assert "sglang-kimi-20991231T000000Z-ffffff.md" not in left      # the oldest by time, though last by name
    assert "sglang-kimi-20261201T101010Z.md" not in left
    assert "sglang-kimi-20000101T000000Z-000000.md" in left
    assert "other-unit-20261201T101010Z.json" in left                  # another unit's history is not ours
    assert len(result["pruned"]) == 4


def test_keep_zero_keeps_no_history(paths):
    write(paths, "# one\n", {"n": 1})
    result = write(paths, "# two\n", {"n": 2}, keep=0)
    assert len(result["history"]) == 2 and sorted(result["pruned"]) == sorted(result["history"])
    assert os.listdir(paths["history_dir"]) == []


def test_check_mode_changes_nothing(paths):
    write(paths, "# one\n", {"n": 1})
    result = write(paths, "# two\n", {"n": 2}, check_mode=True)
    assert result["changed"] is True
    assert open(paths["md_path"]).read() == "# one\n" and not os.path.exists(paths["history_dir"] + "/x")


def test_a_write_that_fails_leaves_the_previous_pair(paths, monkeypatch):
    write(paths, "# one\n", {"n": 1})
    real = _record.write_atomic

    def full_disk(dest, data, **kw):
        if dest.endswith(".sglang-kimi.md.new"):
            raise OSError(28, "No space left on device")
        return real(dest, data, **kw)

    monkeypatch.setattr(_record, "write_atomic", full_disk)
    with pytest.raises(OSError):
        write(paths, "# two\n", {"n": 2})
    assert open(paths["md_path"]).read() == "# one\n"
    assert json.load(open(paths["json_path"])) == {"n": 1}          # the twin was not replaced alone
    assert sorted(os.listdir(os.path.dirname(paths["md_path"]))) == ["history", "sglang-kimi.json", "sglang-kimi.md"]


def test_twin_text_is_what_to_nice_json_wrote():
    assert record_json({"b": 1, "a": [1, "é"]}) == '{\n    "a": [\n        1,\n        "\\u00e9"\n    ],\n    "b": 1\n}\n'
