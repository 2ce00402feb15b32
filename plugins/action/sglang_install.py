# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_install: the files only the controller has - the hash lock (the operator's
sglang_pip_lock, or the one the role ships for the version), the list of versions the role ships locks for, and
the patch files (a bare name is one the role ships) - read here (_install.read_controller_files()) and handed to
the module as its option O(controller_files). A missing file is not an error here: the module refuses it with the
role's message, before anything changes."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.module_utils import _install, _secrets

MODULE = "gpuserve.sglang.sglang_install"


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        patches = args.get("patches") or []
        args["controller_files"] = _install.read_controller_files(
            files_dir=str(args.get("files_dir") or ""), package=str(args.get("package") or "sglang"),
            version=str(args.get("version") or ""), pip_lock=str(args.get("pip_lock") or ""),
            require_hashes=self._bool(args.get("require_hashes", True)),
            patches=patches if isinstance(patches, list) else [])
        # a password or token in the index URL's userinfo: the module gets it as a no_log option of its own, and
        # the URL masked (its record, --diff and messages show it so); pip gets the whole URL in its environment
        secret = _secrets.url_secret(str(args.get("index_url") or ""))
        if secret:
            args["index_url"] = _secrets.mask(str(args["index_url"]))
            args["index_secret"] = secret
        try:
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    @staticmethod
    def _bool(value):
        """The module's bool as AnsibleModule reads it (the option is checked there again)."""
        return str(value).strip().lower() not in ("false", "no", "off", "0", "n", "f", "")
