# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Secrets of the server and router roles: what is masked before it is shown or recorded.

One rule, module_utils/_secrets.py (the modules and the launcher use the same):

- sglang_mask: text (or a list of lines) with every secret field's value and every known secret value masked
  (messages and journal tails the roles print);
- sglang_mask_env: a mapping with the values of secret-named keys masked (for the deployment record and output).

Pure functions; unit-tested in tests/unit/plugins/filter/test_sglang_secrets.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets


def _known(secrets):
    if secrets is None:
        return []
    if isinstance(secrets, str):
        return [secrets]
    if not isinstance(secrets, (list, tuple)):
        raise AnsibleFilterError("the known secrets must be a string or a list of strings, got %s" % type(secrets).__name__)
    return [str(value) for value in secrets if value not in (None, "")]


def sglang_mask(text, secrets=None):
    """Text with the values of secret fields (api_key, --api-key, Authorization: Bearer, ...) and every value in
    ``secrets`` masked; a list: each line masked; None: empty text."""
    if text is None:
        return ""
    known = _known(secrets)
    if isinstance(text, (list, tuple)):
        return [_secrets.mask(str(line), known) for line in text]
    return _secrets.mask(str(text), known)


def sglang_mask_env(env, extra_secret_keys=None, mask=_secrets.MASK):
    """Mapping with the values of secret-named keys (_secrets.is_secret_name) replaced by a mask."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise AnsibleFilterError("the environment must be a mapping, got %s" % type(env).__name__)
    return _secrets.mask_mapping(env, extra_secret_keys or [], mask)


class FilterModule(object):
    """Masking of secrets."""

    def filters(self):
        return {
            "sglang_mask": sglang_mask,
            "sglang_mask_env": sglang_mask_env,
        }
