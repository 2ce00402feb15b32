# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_router_extra_args_problems (issue 41 defect 5): a secret through the gateway's extra flags is refused,
naming the flag and never its value, over every flag of the pinned releases' data."""
import json
import os

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_router import (
    sglang_router_extra_args_problems, sglang_router_secret_flags)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
GATEWAYS = os.path.join(ROOT, "roles", "router", "files", "gateways")


def _flags(release):
    with open(os.path.join(GATEWAYS, release + ".json")) as handle:
        return sorted(json.load(handle)["flags"])


def test_smg_secrets_are_refused_naming_the_flag_not_the_value():
    extra = {"control-plane-api-keys": "admin:cp-VALUE", "tenant-api-key": "tenant-VALUE",
             "oracle-password": "oracle-VALUE", "cb-failure-threshold": 5}
    problems = sglang_router_extra_args_problems(extra, ["api-key"], _flags("smg-1.13.0"), "smg 1.13.0")
    assert len(problems) == 1
    assert "control-plane-api-keys, oracle-password, tenant-api-key" in problems[0]
    assert "VALUE" not in problems[0]


def test_the_pinned_releases_secret_flags_are_exactly_these():
    """Every flag of both pinned releases judged: a new release's data that adds a secret-looking flag shows here."""
    assert sglang_router_secret_flags(dict.fromkeys(_flags("smg-1.13.0"))) == [
        "api-key", "control-plane-api-keys", "mesh-tls-key", "oracle-password", "tenant-api-key"]
    assert sglang_router_secret_flags(dict.fromkeys(_flags("sglang-router-0.3.2"))) == [
        "api-key", "control-plane-api-keys", "oracle-password"]


def test_any_name_that_says_key_password_token_or_secret_is_refused():
    for flag in ("db-password", "hf-token", "client-secret", "admin_api_key", "auth-tokens", "--upstream-apikey"):
        assert sglang_router_secret_flags({flag: "x"}) == [flag]
    for flag in ("tls-key-path", "client-key-path", "rate-limit-tokens-per-second", "tokenizer-path", "policy"):
        assert sglang_router_secret_flags({flag: "x"}) == []


def test_managed_and_unknown_flags_and_not_a_mapping():
    assert sglang_router_extra_args_problems({"host": "x"}, ["host"], ["host"], "r") == [
        "sglang_router_extra_args may not set flags the role manages: host"]
    assert sglang_router_extra_args_problems({"nope": 1}, [], ["host"], "smg 1.13.0") == [
        "flags smg 1.13.0 does not know (sglang_router_extra_args): nope"]
    assert sglang_router_extra_args_problems({"nope": 1}, [], None, "x") == []
    assert "must be a mapping" in sglang_router_extra_args_problems(["a"], [], None)[0]


def test_a_gateway_url_with_a_password_is_a_secret_flag():
    """Issue 48, 7d0d57e: --postgres-db-url / --redis-url with a password passed the secret-flag refusal (their
    names hold no secret word) and landed in the 0644 unit and the gateway's command line."""
    flags = {"postgres-db-url": "postgres://router:pw-1234@db:5432/r", "redis-url": "redis://:pw-5678@cache:6379/0",
             "history-backend": "postgres", "worker-startup-timeout-secs": 600}
    assert sglang_router_secret_flags(flags) == ["postgres-db-url", "redis-url"]
    problems = sglang_router_extra_args_problems(flags, release="smg 1.13.0")
    assert "may not carry secrets: postgres-db-url, redis-url" in problems[0]
    assert "pw-1234" not in " ".join(problems)
    assert sglang_router_secret_flags({"postgres-db-url": "postgres://db:5432/r"}) == []
