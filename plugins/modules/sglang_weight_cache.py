#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_weight_cache
short_description: SGLang's standalone Weight Cache Daemon as its own unit beside the server
version_added: "2.1.0"
description:
  - Keeps an SGLang server's weights on its GPUs across the server's restarts (issue 49) - SGLang's standalone
    Weight Cache Daemon (C(python -m sglang.srt.weight_cache.daemon), 0.5.17 and later) in its own unit, which the
    server (C(--weight-cache-mode client)) maps by CUDA IPC. The server role runs it before the server's module.
  - Refuses, before anything changes, a release without the daemon, speculative decoding where the release refuses
    it, a quantization not on the release's allow-list (read from its wheel, C(module_utils/_sglang_releases.py)),
    and a server over several hosts.
  - Lands the unit atomically when its text differs and enables it. It never stops, starts or restarts the server,
    and never restarts the daemon under a running server. With the server stopped, it starts the daemon (or
    restarts it once when its unit changed). With the server running, the server's next start starts a daemon that
    is not running (the server unit's C(ExecStartPre=+), after the old process is gone), or restarts once a daemon
    whose unit changed (a new release or torch) - the restart marker O(marker_dir)/C(<unit>.restart).
  - V(absent) stops, disables and removes the daemon's unit; refused while the server runs on its weights.
  - The logic lives in C(plugins/module_utils/_weight_cache_host.py) and C(_weight_cache.py).
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Refuses as a real run does and says what it would do (RV(actions)); changes nothing.
  diff_mode:
    support: none
    details: RV(actions) says what was done.
  platform:
    details: Linux hosts with systemd.
options:
  state:
    description: V(present) (the daemon's unit is there and runs, or starts with the server) or V(absent).
    type: str
    choices: [present, absent]
    default: present
  unit:
    description: The daemon's unit, with its suffix.
    type: str
    required: true
  unit_path:
    description: Where its unit file is.
    type: path
    required: true
  content:
    description: The unit's text (the role's template).
    type: str
    default: ""
  server_unit:
    description: The server's unit, with its suffix.
    type: str
    required: true
  release:
    description: The installed SGLang release (the preflight's host read).
    type: str
    default: ""
  args:
    description: The server's effective flags (mapping).
    type: dict
    default: {}
  nodes:
    description: How many hosts the server runs on (0 or 1 for one).
    type: int
    default: 0
  marker_dir:
    description: Where the restart marker is (tmpfs; the server's unit reads the same path).
    type: path
    default: /run/gpuserve-sglang
"""

EXAMPLES = r"""
- name: The Weight Cache Daemon beside the server
  gpuserve.sglang.sglang_weight_cache:
    unit: sglang-weight-cache.service
    unit_path: /etc/systemd/system/sglang-weight-cache.service
    content: "{{ lookup('ansible.builtin.template', 'sglang-weight-cache.service.j2') }}"
    server_unit: sglang.service
    release: 0.5.17
    args: {model-path: /models/Llama, tp: 1}
"""

RETURN = r"""
actions:
  description: What was done (or, in check mode, would be), in order.
  returned: always
  type: list
  elements: str
refusals:
  description: Why the daemon cannot serve this server (the run failed before anything changed).
  returned: always
  type: list
  elements: str
restarted:
  description: The daemon was restarted (its unit changed).
  returned: always
  type: bool
restart_pending:
  description: The daemon restarts once at the server's next start (its unit changed while the server ran).
  returned: always
  type: bool
ready_files:
  description: The files the daemon writes when every rank of the host holds its weights.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils import _weight_cache_host
from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule


def main():
    module = QuietModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            unit=dict(type="str", required=True),
            unit_path=dict(type="path", required=True),
            content=dict(type="str", default=""),
            server_unit=dict(type="str", required=True),
            release=dict(type="str", default=""),
            args=dict(type="dict", default={}),
            nodes=dict(type="int", default=0),
            marker_dir=dict(type="path", default="/run/gpuserve-sglang"),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    p = module.params

    def run(argv):
        return module.run_command(argv)

    host = _weight_cache_host.Host(run, systemctl=module.get_bin_path("systemctl", required=True))
    model_config = _weight_cache_host.read_model_config((p["args"] or {}).get("model-path"))
    try:
        result = _weight_cache_host.converge(host, p["state"], p["unit"], p["unit_path"], p["content"],
                                             p["server_unit"], release=p["release"], args=p["args"],
                                             model_config=model_config, nodes=p["nodes"], marker_dir=p["marker_dir"],
                                             check_mode=module.check_mode)
    except (RuntimeError, OSError) as exc:
        module.fail_json(msg="sglang_weight_cache: %s" % exc)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
