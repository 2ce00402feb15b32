# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 14: sglang_memory_plan never raises a raw Python error; a bad number is a PlanError naming it."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp

MLA = {"attention": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_layers": 61}
BASE = dict(tp=8, mem_fraction_static=0.88, geometry=MLA, total_gib=139.0, weights_gib=70.0,
            mem_available_bytes=2000 * 10 ** 9, hicache=True, ratio=4.0, size_gb=0)
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("key, value, words", [
    ("tp", 0, "tp must be >= 1, not 0"),
    ("tp", "eight", "tp must be a number, not 'eight'"),
    ("tp", NAN, "tp must be a finite number, not nan"),
    ("tp", 1.5, "tp must be a whole number, not 1.5"),
    ("mem_fraction_static", NAN, "mem_fraction_static must be a finite number, not nan"),
    ("mem_fraction_static", INF, "mem_fraction_static must be a finite number, not inf"),
    ("ratio", NAN, "hicache ratio must be a finite number, not nan"),
    ("ratio", -2.0, "hicache ratio must be >= 0, not -2.0"),
    ("size_gb", INF, "hicache size_gb must be a finite number, not inf"),
    ("size_gb", -1, "hicache size_gb must be >= 0, not -1"),
    ("weights_gib", NAN, "weights per GPU (GiB) must be a finite number, not nan"),
    ("total_gib", INF, "must be a finite number, not inf"),
    ("mem_available_bytes", -5, "MemAvailable (bytes) must be >= 0, not -5"),
    ("geometry", dict(MLA, num_layers="x"), "geometry.num_layers must be a number, not 'x'"),
])
def test_bad_number_is_a_plan_error_naming_it(key, value, words):
    with pytest.raises(mp.PlanError) as err:
        mp.make_plan(**dict(BASE, **{key: value}))
    assert words in str(err.value)


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(["tp", "mem_fraction_static", "total_gib", "weights_gib", "ratio", "size_gb",
                            "page_size", "mem_available_bytes"]),
       value=st.one_of(st.floats(), st.integers(min_value=-10 ** 30, max_value=10 ** 30), st.text(max_size=5),
                       st.none(), st.booleans(), st.lists(st.integers(), max_size=2)))
def test_never_a_raw_error(key, value):
    try:
        plan = mp.make_plan(**dict(BASE, **{key: value}))
    except mp.PlanError:
        return
    assert isinstance(plan["summary"], str)
