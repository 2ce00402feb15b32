# SPDX-License-Identifier: GPL-3.0-or-later
"""Secrets masked in every form SGLang prints them (issue 21), by the module (_secrets) and by the launcher that
runs on the host (roles/server/files/sglang_launch.py), which must carry the same patterns.

Property-style: every combination of form (repr, dict, JSON, flag), quoting, secret field name and a value with
awkward characters, embedded among non-secret fields; the secret never survives, the other fields do."""
import itertools
import json
import os
import random

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_logs as logs
from conftest import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
LAUNCHER = os.path.join(ROOT, "roles", "server", "files", "sglang_launch.py")
NAMES = ["api_key", "admin_api_key", "API_KEY", "hf_token", "router_api_key", "client_secret", "secret_key",
         "db_password", "watermark_secret"]
VALUES = ["sk-live-0523", "sk-with space", "sk,comma)paren}", "sk'quote", 'sk"dq', "sk\\back", "a=b:c", "Ωmega-ключ"]
OTHERS = {"model_path": "/srv/models/Kimi-K2.5", "max_total_num_tokens": 159277, "tp_size": 8,
          "hicache_ratio": 4.0, "tokenizer_path": "/srv/models/tok", "max_new_tokens": 16}


def launcher():
    return load_file("sglang_launch_under_test", LAUNCHER)


def renderings(name, value):
    """The forms SGLang (0.5.9, 0.5.23), JSON answers and command lines give a field."""
    fields = dict(OTHERS)
    fields[name] = value
    items = list(fields.items())
    random.Random(name + value).shuffle(items)
    ordered = dict(items)
    yield "repr", "server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in ordered.items())
    yield "dict", "server_args=%r" % (ordered,)
    yield "json", json.dumps({"server_args": ordered, "launch_command": "x"})
    flag = "--" + name.lower().replace("_", "-")
    if " " not in value and "'" not in value and '"' not in value:
        yield "flag", "python -m sglang.launch_server --tp 8 %s %s --port 30000" % (flag, value)
        yield "flag=", "python -m sglang.launch_server --tp 8 %s=%s --port 30000" % (flag, value)
    yield "flag-quoted", "launch_command: python -m sglang.launch_server %s '%s' --port 30000" % (
        flag, value.replace("'", ""))


CASES = [(name, value, form, text) for name, value in itertools.product(NAMES, VALUES)
         for form, text in renderings(name, value)]


def _raw_forms(value):
    """How the value itself can appear: as given, repr-escaped, JSON-escaped."""
    return {value, repr(value)[1:-1], json.dumps(value)[1:-1], value.replace("'", "")}


@pytest.mark.parametrize("name,value,form,text", CASES, ids=["%s-%s-%d" % (c[2], c[0], i) for i, c in enumerate(CASES)])
def test_every_form_is_masked_by_the_module_and_the_launcher_alike(name, value, form, text):
    masked = _secrets.mask(text)
    for raw in _raw_forms(value):
        assert raw not in masked, (form, masked)
    assert _secrets.MASK in masked
    # what is not a secret is left as it was
    for key in ("max_total_num_tokens", "max_new_tokens"):
        if form not in ("flag", "flag=", "flag-quoted"):
            assert key in masked and str(OTHERS[key]) in masked
    assert launcher().mask(text) == masked
    assert logs.mask_secrets(text) == masked


def test_the_launcher_carries_the_module_s_patterns_verbatim():
    module = launcher()
    assert module.SECRET_NAME == _secrets.SECRET_NAME
    assert module.KEYWORD_PATTERN == _secrets.KEYWORD_PATTERN
    assert module.MAPPING_PATTERN == _secrets.MAPPING_PATTERN
    assert module.FLAG_PATTERN == _secrets.FLAG_PATTERN
    assert module.MASK == _secrets.MASK


@pytest.mark.parametrize("text", [
    "server_args=ServerArgs(api_key=None, admin_api_key=None, tp_size=8)",
    "server_args={'api_key': None, 'admin_api_key': None, 'tp_size': 8}",
    '{"api_key": null, "tp_size": 8}',
    "max_total_num_tokens=159277, chunked_prefill_size=8192, max_prefill_tokens=16384",
    "[2026-12-02 10:00:00 TP0] Allocating kv hierarchical KV host pool: 637109 tokens, 44.77 GB host memory.",
    "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00",
])
def test_what_holds_no_secret_is_left_alone(text):
    assert _secrets.mask(text) == text
    assert launcher().mask(text) == text


def test_a_known_secret_is_masked_wherever_it_appears():
    assert "sk-live-1" not in _secrets.mask("Unauthorized: sk-live-1 from 10.0.0.1", ["sk-live-1"])
    assert _secrets.mask(None) is None and _secrets.mask("") == ""
