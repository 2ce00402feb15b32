# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters sglang_default / sglang_defaults (issue 39, one table of SGLang's defaults): the roles' YAML reads SGLang's
defaults per release from the release table taken from each wheel, and the collection's planning assumptions only
where SGLang computes the value at start-up."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter import sglang_defaults as f
from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan
from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_releases as tables


@pytest.mark.parametrize("release", sorted(tables.RELEASES, key=tables._vkey))
def test_each_release_s_defaults_are_its_table_s(release):
    assert f.sglang_defaults(release) == tables.RELEASES[release]["defaults"]
    for field, value in tables.RELEASES[release]["defaults"].items():
        assert f.sglang_default(field, release) == value


def test_the_flags_the_roles_read_by_the_collection_s_names():
    # tp (and its aliases) is ServerArgs' tp_size; dashes, underscores and leading dashes are one name
    for name in ("tp", "tp-size", "tp_size", "--tp", "tensor-parallel-size", "--tensor-parallel-size"):
        assert f.sglang_default(name, "0.5.9") == 1
    for name in ("enable-hierarchical-cache", "--enable-hierarchical-cache", "enable_hierarchical_cache"):
        assert f.sglang_default(name, "0.5.23") is False
    assert f.sglang_default("hicache-ratio", "0.5.17") == 2.0
    assert f.sglang_default("hicache-ratio", "0.5.18") is None       # SGLang computes it from 0.5.18
    assert f.sglang_default("page-size", "0.5.9") is None
    assert f.sglang_default("mem-fraction-static", "0.5.23") is None
    assert f.sglang_default("hicache-size", "0.5.23") == 0
    assert f.sglang_default("kv-cache-dtype", "0.5.23") == "auto"
    assert f.sglang_default("dp", "0.5.23") == 1                      # alias of dp-size


def test_planning_gives_the_collection_s_assumption_only_where_sglang_computes_the_value():
    assumptions = _memory_plan.PLANNING_ASSUMPTIONS
    assert assumptions == {"mem_fraction_static": 0.88, "page_size": 1, "hicache_ratio": 2.0}
    for release, table in tables.RELEASES.items():
        declared = table["defaults"]
        assert set(assumptions) <= set(declared), release
        planned = f.sglang_defaults(release, planning=True)
        for field, value in declared.items():
            if value is None and field in assumptions:
                assert planned[field] == assumptions[field], (release, field)
            else:
                assert planned[field] == value, (release, field)    # SGLang's own value is never replaced
    assert f.sglang_default("hicache-ratio", "0.5.17", planning=True) == 2.0   # SGLang's declared 2.0
    assert f.sglang_default("hicache-ratio", "0.5.23", planning=True) == 2.0   # the collection's assumption
    assert f.sglang_default("max-running-requests", "0.5.23", planning=True) is None   # no assumption: stays None


def test_a_release_without_a_table_and_none_follow_the_table_s_rule():
    newest = sorted(tables.RELEASES, key=tables._vkey)[-1]
    assert f.sglang_defaults("") == f.sglang_defaults(None) == tables.server_defaults(newest)
    assert f.sglang_defaults("  0.5.23 ") == tables.server_defaults("0.5.23")
    assert f.sglang_default("hicache-ratio", "0.5.17.post2") == 2.0      # 0.5.17's table
    assert f.sglang_default("hicache-ratio", "0.6.0") is None            # the newest table's
    assert f.sglang_defaults("0.5.1") == tables.server_defaults("0.5.9")  # older than every table: the oldest's


def test_the_result_is_a_copy():
    defaults = f.sglang_defaults("0.5.9", planning=True)
    defaults["tp_size"] = 99
    assert tables.RELEASES["0.5.9"]["defaults"]["tp_size"] == 1
    assert f.sglang_defaults("0.5.9")["tp_size"] == 1


@pytest.mark.parametrize("name,release,text", [
    ("no-such-flag", "0.5.9", "holds no default for 'no-such-flag' (field no_such_flag); it holds "),
    ("", "0.5.9", "a flag or ServerArgs field name is needed"),
    ("--", "0.5.9", "a flag or ServerArgs field name is needed"),
    (None, "0.5.9", "a flag or ServerArgs field name is needed"),
    ("tp", 0.5, "the SGLang release must be a string"),
])
def test_bad_input_is_an_error_that_says_what_is_wrong(name, release, text):
    with pytest.raises(AnsibleFilterError) as err:
        f.sglang_default(name, release)
    assert text in str(err.value)


def test_the_filters_are_registered():
    assert set(f.FilterModule().filters()) == {"sglang_default", "sglang_defaults"}
