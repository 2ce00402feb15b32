# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang's own defaults for the roles' YAML, per release: the one table (module_utils/_sglang_releases, ServerArgs'
declared defaults taken from each release's wheel by scripts/gen-sglang-texts.py, file:line in
tests/fixtures/sglang/<release>.json), read through ``server_default`` / ``server_defaults`` like the Python
consumers (_systemd.py, filter sglang_nodes) do. No role file states an SGLang default of its own
(tests/unit/roles/test_sglang_defaults_in_roles.py).

Where SGLang computes a value at start-up (None in the table: mem_fraction_static, page_size, hicache_ratio from
0.5.18), ``planning=true`` gives the collection's planning assumption instead (module_utils/_memory_plan
PLANNING_ASSUMPTIONS), for the memory plan, which needs a number before the start.

Pure functions, no host access (tests/unit/plugins/filter/test_sglang_defaults.py).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import ALIASES
from ansible_collections.gpuserve.sglang.plugins.module_utils._memory_plan import PLANNING_ASSUMPTIONS
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import server_defaults

# The collection's flag names whose ServerArgs field is not the flag with '_' for '-' (aliases folded first).
_FIELDS = {"tp": "tp_size"}


def _release(release, what):
    if release is None:
        return ""
    if not isinstance(release, str):
        raise AnsibleFilterError("%s: the SGLang release must be a string such as '0.5.23' ('' for none), got %r"
                                 % (what, release))
    return release.strip()


def _planned(defaults):
    return dict((field, PLANNING_ASSUMPTIONS[field] if value is None and field in PLANNING_ASSUMPTIONS else value)
                for field, value in defaults.items())


def sglang_defaults(release="", planning=False):
    """SGLang's declared defaults for ``release`` (a dict keyed by ServerArgs field: tp_size,
    enable_hierarchical_cache, hicache_ratio, page_size, ...): the release's own table; a release without one, the
    newest older table's (the oldest's when older than all); '' or none, the newest table's. ``planning``: where
    SGLang computes the value at start-up (None), the collection's planning assumption instead, if it has one."""
    defaults = server_defaults(_release(release, "sglang_defaults") or None)
    return _planned(defaults) if planning else defaults


def sglang_default(name, release="", planning=False):
    """One of sglang_defaults(release, planning): ``name`` is a ServerArgs field (tp_size, hicache_ratio) or a flag
    as sglang_args spells it (tp, tp-size, --enable-hierarchical-cache, hicache_ratio); a name the table does not
    hold is an error naming those it does."""
    if not isinstance(name, str) or not name.strip().lstrip("-"):
        raise AnsibleFilterError("sglang_default: a flag or ServerArgs field name is needed, got %r" % (name,))
    flag = name.strip().lstrip("-").replace("_", "-").lower()
    flag = ALIASES.get(flag, flag)
    field = _FIELDS.get(flag, flag.replace("-", "_"))
    defaults = sglang_defaults(_release(release, "sglang_default"), planning=planning)
    if field not in defaults:
        raise AnsibleFilterError("sglang_default: SGLang's release table holds no default for %r (field %s); it holds %s"
                                 % (name, field, ", ".join(sorted(defaults))))
    return defaults[field]


class FilterModule(object):
    """SGLang's defaults per release."""

    def filters(self):
        return {
            "sglang_default": sglang_default,
            "sglang_defaults": sglang_defaults,
        }
