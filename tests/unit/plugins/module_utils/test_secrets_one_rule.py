# SPDX-License-Identifier: GPL-3.0-or-later
"""ONE rule for what is a secret (issue 48): module_utils/_secrets.py decides, and each place that decided on its
own before (the router's flag words, the server role's input list, Desired.withheld, the machine's mask_all, the
record's _scrub, the filters) now asks it. Each test names a secret only one of the old places knew; on the old
code the other places missed it."""
from __future__ import annotations

import json
import os
import glob

import pytest

from ansible_collections.gpuserve.sglang.plugins.filter import server_inputs, sglang_args, sglang_router
from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good, _record, _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import desired as _desired
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import machine as _machine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
CANARY = "Zq7-one-rule-canary-4411"

# flags whose secret only the old router list knew (a secret word inside the name) or only the old name rule
# knew (none), and a URL with userinfo only the newest rule knew
SECRET_FLAGS = [("jwt-key-pem", CANARY), ("ssl-passphrase", CANARY), ("auth-tokens", CANARY),
                ("tenant-api-key", CANARY), ("redis-url", "redis://:%s@cache:6379/0" % CANARY)]
PLAIN_FLAGS = [("max-total-tokens", "8192"), ("tls-key-path", "/etc/ssl/k.pem"), ("routing-key-headers", "X-User"),
               ("redis-url", "redis://cache:6379/0"), ("port", "30000")]


@pytest.mark.parametrize("flag,value", SECRET_FLAGS)
def test_a_secret_flag_is_refused_by_the_router_and_masked_everywhere(flag, value):
    assert _secrets.is_secret_flag(flag, value)
    assert sglang_router.sglang_router_secret_flags({flag: value}) == [flag]
    for text in ("--%s %s" % (flag, value), "--%s=%s" % (flag, value), "['--%s', '%s']" % (flag, value)):
        assert CANARY not in _secrets.mask(text), text
    assert CANARY not in json.dumps(_secrets.mask(["python", "--%s" % flag, value, "--port", "1"]))
    assert CANARY not in json.dumps(_machine.mask_all({"cmd": ["--%s" % flag, value], "t": "--%s %s" % (flag, value)},
                                                      []))


@pytest.mark.parametrize("flag,value", PLAIN_FLAGS)
def test_a_plain_flag_is_neither_refused_nor_masked(flag, value):
    assert not _secrets.is_secret_flag(flag, value)
    assert sglang_router.sglang_router_secret_flags({flag: value}) == []
    assert _secrets.mask("--%s %s" % (flag, value)) == "--%s %s" % (flag, value)


def test_the_server_args_hide_a_secret_flags_value_by_the_flag_rule():
    problems = sglang_args.sglang_args_problems({"jwt-key-pem": CANARY + "\n"}, {})
    assert any("jwt-key-pem" in problem and "value not shown" in problem for problem in problems), problems
    assert CANARY not in "\n".join(problems)


@pytest.mark.parametrize("name", ["sglang_router_api_key", "sglang_hf_token", "sglang_db_password"])
def test_the_server_roles_inputs_hide_every_secret_named_value(name):
    problems = server_inputs.sglang_input_problems({name: CANARY + "\n"})
    assert problems and CANARY not in "\n".join(problems)


@pytest.mark.parametrize("name", ["HF_TOKEN", "SSL_PASSPHRASE", "DB_PASSWORD", "OPENAI_API_KEY"])
def test_an_environment_secret_is_a_secret_to_every_place(name):
    env_text = "%s=%s\nNCCL_DEBUG=WARN\n" % (name, CANARY)
    assert _secrets.env_secrets(env_text) == [CANARY]
    assert CANARY.encode() not in _last_good.redact_env(env_text.encode())
    assert _secrets.mask_mapping({name: CANARY})[name] == _secrets.MASK
    assert CANARY not in _secrets.mask(env_text)
    spec = _desired.FileSpec("/etc/sglang/x.env", env_text, "0600", kind=_desired.ENV)
    assert _desired.Desired("x", [spec]).withheld() == ["/etc/sglang/x.env"]


def test_an_env_file_without_a_secret_shows_its_checksum():
    spec = _desired.FileSpec("/etc/sglang/x.env", "NCCL_DEBUG=WARN\n", "0600", kind=_desired.ENV)
    assert _desired.Desired("x", [spec]).withheld() == []


def test_an_index_url_token_is_a_secret_of_the_env_and_of_the_text():
    url = "https://ci:%s@pypi.example/simple" % CANARY
    assert _secrets.env_secrets({"PIP_INDEX_URL": url}) == [CANARY]
    assert CANARY not in _secrets.mask("pip install --index-url %s x" % url)


def test_the_record_scrub_replaces_every_form_of_a_known_value():
    secret = CANARY + '"\\'
    data = {"a": [json.dumps({"v": secret})], "b": repr(secret), "c": "secrets file: " + secret}
    scrubbed = json.dumps(_record._scrub(data, [secret]))
    assert CANARY not in scrubbed
    assert "secrets file: " in scrubbed   # the known-values form leaves the fixed texts as they are


def test_the_machines_literal_keys_keep_their_fixed_texts():
    out = _machine.mask_all({"reasons": ["secrets file would change"], "msg": "api_key=" + CANARY}, [])
    assert out == {"reasons": ["secrets file would change"], "msg": "api_key=" + _secrets.MASK}


def test_every_flag_of_the_pinned_gateways_is_classified_as_before():
    """The flag rule on every flag of the pinned gateways: exactly the four secrets the router list refused."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "router", "files", "gateways", "*.json"))):
        with open(path) as handle:
            flags = json.load(handle)["flags"]
        found[os.path.basename(path)] = sorted(flag for flag in flags if _secrets.is_secret_flag(flag))
    assert found == {"sglang-router-0.3.2.json": ["api-key", "control-plane-api-keys", "oracle-password"],
                     "smg-1.13.0.json": ["api-key", "control-plane-api-keys", "mesh-tls-key", "oracle-password",
                                         "tenant-api-key"]}


def test_no_other_module_keeps_a_secret_list_of_its_own():
    """The names the old places kept are gone: every place imports the one rule."""
    for path, names in (("plugins/filter/sglang_router.py", ("SECRET_FLAG_WORDS", "NOT_SECRET_FLAGS")),
                        ("plugins/filter/server_inputs.py", ("SECRETS = ",))):
        with open(os.path.join(ROOT, path)) as handle:
            text = handle.read()
        assert not [name for name in names if name in text], path


def test_register_returns_the_values_and_works_on_every_core():
    assert _secrets.register(["", "  ", CANARY, None]) == [CANARY]
