# SPDX-License-Identifier: GPL-3.0-or-later
"""Masking of secrets (plugins/filter/sglang_secrets.py)."""
from __future__ import annotations

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_secrets as f


def test_mask_env():
    masked = f.sglang_mask_env({"SGLANG_API_KEY": "s3cret", "HF_TOKEN": "hf_x", "NCCL_DEBUG": "WARN", "MY_PW": "p",
                                "EMPTY_KEY": ""}, extra_secret_keys=["MY_PW"])
    assert masked == {"SGLANG_API_KEY": "********", "HF_TOKEN": "********", "NCCL_DEBUG": "WARN",
                      "MY_PW": "********", "EMPTY_KEY": ""}


def test_mask_env_none_and_admin_key():
    assert f.sglang_mask_env(None) == {}
    assert f.sglang_mask_env({"SGLANG_ADMIN_API_KEY": "a", "HF_HUB_OFFLINE": "1"}) == {
        "SGLANG_ADMIN_API_KEY": "********", "HF_HUB_OFFLINE": "1"}
