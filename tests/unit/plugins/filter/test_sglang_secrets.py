# SPDX-License-Identifier: GPL-3.0-or-later
"""Masking of secrets (plugins/filter/sglang_secrets.py)."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
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


def test_mask_text_uses_the_module_utils_rule():
    """One rule: the filter is module_utils/_secrets.mask (the old filter had its own rule, and the roles three
    Jinja replace()s of the one key)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
    text = "failed: ['--api-key', 'sk-1'] admin-api-key: adm-2 Authorization: Bearer sk-3 echo adm-4"
    masked = f.sglang_mask(text, ["adm-4", ""])
    assert masked == _secrets.mask(text, ["adm-4"])
    for secret in ("sk-1", "adm-2", "sk-3", "adm-4"):
        assert secret not in masked
    assert f.sglang_mask(["a api_key=x", "b"], "b") == ["a api_key=********", "********"]
    assert f.sglang_mask(None) == "" and f.sglang_mask("plain", None) == "plain"
    with pytest.raises(AnsibleFilterError, match="known secrets"):
        f.sglang_mask("x", {"a": 1})


def test_mask_env_follows_the_one_rule():
    """Gateway and token names the old KEY/TOKEN/SECRET rule gave by accident or not at all, and names that hold
    no secret although they contain one of those words."""
    masked = f.sglang_mask_env({"SMG_TENANT_API_KEY": "t", "ORACLE_PASSWORD": "p", "HUGGING_FACE_HUB_TOKEN": "h",
                                "SGLANG_SECRETS_FILE": "/etc/x", "MAX_TOTAL_TOKENS": "5"})
    assert masked == {"SMG_TENANT_API_KEY": "********", "ORACLE_PASSWORD": "********",
                      "HUGGING_FACE_HUB_TOKEN": "********", "SGLANG_SECRETS_FILE": "/etc/x", "MAX_TOTAL_TOKENS": "5"}
    with pytest.raises(AnsibleFilterError):
        f.sglang_mask_env(["A"])


def test_a_secret_flag_value_is_not_shown_in_a_refusal():
    """sglang_args: a secret flag's value with a control character was quoted in the refusal."""
    from ansible_collections.gpuserve.sglang.plugins.filter import sglang_args
    problems = sglang_args.sglang_args_problems({"hf-token": "hf_s3cret\n"}, {})
    assert "hf_s3cret" not in " ".join(problems)
    assert "sglang_args: --hf-token holds control characters (value not shown): refused" in problems


def test_the_roles_mask_through_the_filter_and_no_log_with_either_key():
    """No Jinja replace() of a key in the roles (the filter masks every form and both keys), and every task whose
    no_log hides a key result hides it with the admin key alone too."""
    import glob
    import os
    import re
    from conftest import ROOT
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml")):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        assert not re.search(r"replace\(\s*sglang_\w*api_key", text), path
        assert 'no_log: "{{ sglang_api_key | length > 0 }}"' not in text, path
        assert "no_log: \"{{ sglang_api_key | default('') | length > 0 }}\"" not in text, path


@pytest.mark.parametrize("keys", [{"sglang_api_key": "sk-1"}, {"sglang_admin_api_key": "adm-1"},
                                  {"sglang_api_key": "sk-1", "sglang_admin_api_key": "adm-1"}])
def test_no_launcher_with_a_key_is_refused(keys):
    """Issue 41 defect 7: sglang_launch_script "" with a key was accepted, and SGLang printed api_key='...' into
    the journal. The preflight (sglang_input_problems, before any change) refuses it, naming the key, not its value."""
    from ansible_collections.gpuserve.sglang.plugins.filter import server_inputs
    inputs = dict({"sglang_api_key": "", "sglang_admin_api_key": ""}, sglang_launch_script="", **keys)
    found = server_inputs.sglang_input_problems(inputs)
    assert len(found) == 1 and found[0].startswith("sglang_launch_script is empty while ")
    assert all(name in found[0] for name in keys) and "sk-1" not in found[0] and "adm-1" not in found[0]
    # with the launcher, or without a key, nothing to refuse
    assert server_inputs.sglang_input_problems(dict(inputs, sglang_launch_script="/usr/local/lib/x.py")) == []
    assert server_inputs.sglang_input_problems({"sglang_api_key": "", "sglang_admin_api_key": "",
                                                "sglang_launch_script": ""}) == []
