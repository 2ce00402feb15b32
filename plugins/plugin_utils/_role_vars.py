# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of a role's variables for the collection's action plugins: each name resolved as the task's
templar sees it (role vars, defaults, facts, extra vars), hostvars left as Ansible's lazy view."""

from __future__ import annotations

from ansible.errors import AnsibleUndefinedVariable

MISSING = object()


def reader(templar, task_vars, **overrides):
    """``read(name, default=MISSING)``: the variable ``name`` templated; ``default`` where it is undefined (raises
    AnsibleUndefinedVariable without one). ``overrides`` replace variables of ``task_vars`` for this reader only."""
    env = dict(task_vars or {}, **overrides) if overrides else (task_vars or {})
    view = templar.copy_with_new_env(available_variables=env)

    def read(name, default=MISSING):
        try:
            return view.resolve_variable_expression(name)
        except AnsibleUndefinedVariable:
            if default is MISSING:
                raise
            return default
    return read
