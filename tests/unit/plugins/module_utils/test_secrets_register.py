# SPDX-License-Identifier: GPL-3.0-or-later
"""ansible-core 2.22's masking API (issue 48): every module that takes a secret registers each secret value its
options carry (``_secrets.module_secrets``: no_log options, an environment file's HF_TOKEN, a secrets file's keys,
a URL's userinfo) with ``ansible.module_utils.secrets.register_secrets`` where the core has it, so that its failure
results and run_command's messages are masked by the core too; on 2.19-2.21 the import is guarded."""
from __future__ import annotations

import ast
import glob
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.entry import ARGUMENT_SPEC

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
KEY, ADMIN, HF, INDEX, ROUTER = ("Zq7-key-1", "Zq7-admin-2", "hf_Zq7tok3", "Zq7-index-4", "Zq7-router-5")


@pytest.fixture
def registered(monkeypatch):
    seen = []
    monkeypatch.setattr(_secrets, "_register_secrets", seen.extend)
    return seen


def server_params():
    return {"api_key": KEY, "secrets_to_mask": [KEY],
            "env": {"path": "/etc/sglang/u.env", "content": "NCCL_DEBUG=WARN\nHF_TOKEN=\"%s\"\n" % HF},
            "secrets": {"path": "/etc/sglang/u.secrets.yaml", "content": "api-key: %s\nadmin-api-key: '%s'\n"
                        % (KEY, ADMIN)},
            "unit": {"path": "/etc/systemd/system/u.service", "content": "[Service]\nExecStart=/p -m s --port 1\n"}}


def test_the_server_modules_secrets_are_registered(registered):
    found = _secrets.module_secrets(server_params(), ARGUMENT_SPEC)
    for value in (KEY, ADMIN, HF):
        assert value in registered and value in found
    assert "NCCL_DEBUG" not in " ".join(v for v in registered if "HF_TOKEN" not in v)


def test_an_index_url_and_a_router_env_are_registered(registered):
    _secrets.module_secrets({"index_url": "https://ci:%s@pypi.example/simple" % INDEX,
                             "env": {"content": "SGLANG_ROUTER_API_KEY=%s\n" % ROUTER}})
    assert INDEX in registered and ROUTER in registered


def test_nothing_is_registered_without_a_secret(registered):
    assert _secrets.module_secrets({"url": "http://127.0.0.1:30000", "env": {"content": "NCCL_DEBUG=WARN\n"},
                                    "max_tokens": 8}, {"url": {}, "env": {}, "max_tokens": {}}) == []
    assert registered == []


def test_without_the_api_nothing_breaks(monkeypatch):
    monkeypatch.setattr(_secrets, "_register_secrets", None)
    assert _secrets.register([KEY]) == [KEY]


def test_with_the_cores_api_a_registered_value_is_masked_by_the_core():
    """On ansible-core 2.22+ (the controller matrix's 2.22.0rc1 venv) the core itself masks what we registered."""
    core = pytest.importorskip("ansible.module_utils.secrets")
    _secrets.module_secrets(server_params(), ARGUMENT_SPEC)
    masked = core.mask_secrets("token %s in a failure" % HF)
    assert HF not in masked


def _takes_a_secret(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "no_log" and getattr(node.value, "value", None) is True:
            parent_is_module = False
            for call in ast.walk(tree):
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("AnsibleModule", "QuietModule") \
                        and node in call.keywords:
                    parent_is_module = True
            if not parent_is_module:
                return True
    return False


def test_every_module_that_takes_a_secret_registers_it():
    """A module with a no_log option (a key, a token, an environment file's content) calls module_secrets; the
    server module through _server/entry.py's run_module."""
    missing = []
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))):
        text = open(path).read()
        if _takes_a_secret(ast.parse(text)) and "module_secrets(" not in text and "run_module" not in text:
            missing.append(os.path.basename(path))
    assert missing == []
    entry = open(os.path.join(ROOT, "plugins", "module_utils", "_server", "entry.py")).read()
    assert "_secrets.module_secrets(p, ARGUMENT_SPEC)" in entry


def test_code_and_unit_texts_register_nothing(registered):
    """A launcher's source (``SECRET_NAME = (r"...``) or a unit file is no environment file: nothing of it is
    registered (the core would mask it in every diff)."""
    launcher = open(os.path.join(ROOT, "roles", "server", "files", "sglang_launch.py")).read()
    _secrets.module_secrets({"launcher": {"path": "/x", "content": launcher},
                             "unit": {"path": "/u", "content": "[Service]\nEnvironment=API_TOKEN=not-a-file\n"}},
                            ARGUMENT_SPEC)
    assert registered == []


def test_a_masked_url_registers_no_mask(registered):
    _secrets.module_secrets({"index_url": "https://ci:%s@pypi.example/simple" % _secrets.MASK})
    assert registered == []
