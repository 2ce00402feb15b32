# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Secrets masked in every form SGLang prints them (issue 21): one implementation, three users.

SGLang 0.5.9 logs ``server_args=ServerArgs(api_key='sk-...', ...)`` (a dataclass repr); 0.5.23 logs
``server_args={'model_path': ..., 'api_key': 'sk-...'}`` (a dict) and reports the merged argv, key included, in
``launch_command`` of /get_server_info; JSON answers carry ``"api_key": "..."``; command lines carry
``--api-key X`` or ``--api-key=X``. The same field names are secret in every form: ``api_key``,
``admin_api_key`` and any ``*_api_key``, ``*_token`` (``hf_token``), ``*secret*`` or ``*password*`` field.

roles/server/files/sglang_launch.py (runs on the host, outside the collection) carries the same three pattern
texts; tests/unit/plugins/module_utils/test_secrets.py fails when they differ.
"""

from __future__ import annotations

import re

MASK = "********"
# A field name that holds a secret (python identifiers: server_args fields, JSON keys).
# ``*_token`` only as the end of the name: max_total_num_tokens is not a secret.
SECRET_NAME = r"(?:[A-Za-z_]*(?:api_key|_token)|[A-Za-z_]*(?:secret|password)[A-Za-z_]*)(?![A-Za-z0-9_])"
# name='v' / name="v" / name=v (a repr or a key=value list)
KEYWORD_PATTERN = (r"(?P<lead>\b" + SECRET_NAME + r"=)"
                   r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,)\s]+)")
# 'name': 'v' / "name": "v" / 'name': v (a dict repr, JSON)
MAPPING_PATTERN = (r"(?P<lead>(?P<q>['\"])" + SECRET_NAME + r"(?P=q)\s*:\s*)"
                   r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,}\s]+)")
# --api-key v / --api-key=v / --hf-token v (command lines)
FLAG_PATTERN = (r"(?P<lead>--(?:[a-z-]*(?:api-key|-token)|[a-z-]*(?:secret|password)[a-z-]*)(?![a-z0-9_-])(?:=|\s+))"
                r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s'\"]+(?:['\"][^\s'\",}]+)*)")

KEYWORD_RE = re.compile(KEYWORD_PATTERN, re.IGNORECASE)
MAPPING_RE = re.compile(MAPPING_PATTERN, re.IGNORECASE)
FLAG_RE = re.compile(FLAG_PATTERN, re.IGNORECASE)
_EMPTY = ("None", "null", "''", '""')


def _masked(match):
    value = match.group("value")
    if value in _EMPTY:
        return match.group(0)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return match.group("lead") + quote + MASK + quote


def mask(text, secrets=()):
    """text with every secret field's value masked (None and empty values kept, so "no key set" still shows),
    and every known secret value replaced wherever it appears. Not a string: returned as it is."""
    if not isinstance(text, str) or not text:
        return text
    for secret in secrets or ():
        if secret:
            text = text.replace(secret, MASK)
    text = MAPPING_RE.sub(_masked, text)
    text = KEYWORD_RE.sub(_masked, text)
    return FLAG_RE.sub(_masked, text)
