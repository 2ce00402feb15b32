# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/_role_vars.py: the one reader of role variables of the collection's action plugins."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleUndefinedVariable
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _role_vars


def _templar():
    return Templar(loader=DataLoader(), variables={})


def test_a_variable_is_templated_as_the_tasks_templar_sees_it():
    read = _role_vars.reader(_templar(), {"a": "x", "b": trust_as_template("{{ a }}-y")})
    assert read("b") == "x-y"


def test_an_undefined_variable_takes_the_default_or_raises():
    read = _role_vars.reader(_templar(), {"a": 1})
    assert read("missing", None) is None
    assert read("missing", "d") == "d"
    with pytest.raises(AnsibleUndefinedVariable):
        read("missing")


def test_overrides_replace_the_tasks_variables_for_this_reader_only():
    task_vars = {"_server_host": {"old": True}, "c": trust_as_template("{{ _server_host }}")}
    read = _role_vars.reader(_templar(), task_vars, _server_host={"new": True})
    assert read("c") == {"new": True}
    assert task_vars["_server_host"] == {"old": True}
