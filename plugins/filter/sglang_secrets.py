# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Secrets of the server role: what is masked before it is shown or recorded.

- sglang_mask_env: a mapping with the values of secret-looking keys masked (for the deployment record and output).

Pure functions; unit-tested in tests/unit/plugins/filter/test_sglang_secrets.py.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

SECRET_KEY_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)


def sglang_mask_env(env, extra_secret_keys=None, mask="********"):
    """Mapping with the values of secret-looking keys (…KEY, TOKEN, SECRET, PASSWORD…) replaced by a mask."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise AnsibleFilterError("the environment must be a mapping, got %s" % type(env).__name__)
    extra = set(extra_secret_keys or [])
    out = {}
    for key, value in env.items():
        secret = key in extra or bool(SECRET_KEY_RE.search(str(key)))
        out[key] = mask if secret and value not in (None, "") else value
    return out


class FilterModule(object):
    """Masking of secrets."""

    def filters(self):
        return {
            "sglang_mask_env": sglang_mask_env,
        }
