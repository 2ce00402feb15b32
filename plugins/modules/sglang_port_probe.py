#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_port_probe
short_description: Whether this host reaches TCP ports of another host (a multi-node server's node 0)
version_added: 0.4.0
description:
  - One TCP connect per port of O(ports) on O(host), each bounded by O(timeout) seconds. A port is reachable when
    something listens (V(open)) or the host answers with a reset (V(refused) - nothing listens yet, the path is
    open); V(timeout) (a firewall drops the packets), V(unreachable) (no route) and V(unresolved) are not.
  - The server role's preflight runs it on every node but node 0 of a server over several hosts, against node 0's
    C(--dist-init-addr) port and the five after it, before anything stops.
  - Read-only. The logic is C(plugins/module_utils/_port_probe.py); standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  host:
    description: The host to reach (a name or an IP address, without brackets).
    type: str
    required: true
  ports:
    description: The TCP ports.
    type: list
    elements: int
    required: true
  timeout:
    description: Seconds to wait for each connect.
    type: float
    default: 5
  fail_msg:
    description:
      - When set, fail when a port is not reachable, with this text followed by the ports that are not, each port's
        state, and what to do. V('') returns the states and never fails on them.
    type: str
    default: ""
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
attributes:
  platform:
    details: Any host; standard library only.
"""

EXAMPLES = r"""
- name: Node 0's dist port and the five after it
  gpuserve.sglang.sglang_port_probe:
    host: 10.0.0.11
    ports: [50000, 50001, 50002, 50003, 50004, 50005]
  register: probe
"""

RETURN = r"""
ports:
  description: Port to its state - open, refused, timeout, unreachable, unresolved or error.
  returned: always
  type: dict
errors:
  description: Port to the error text, for the ports that did not connect.
  returned: always
  type: dict
reachable:
  description: Every port open or refused.
  returned: always
  type: bool
blocked:
  description: The ports that are not reachable.
  returned: always
  type: list
  elements: int
"""

import json

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._port_probe import probe_all


def main():
    module = QuietModule(
        argument_spec=dict(
            host=dict(type="str", required=True),
            ports=dict(type="list", elements="int", required=True),
            timeout=dict(type="float", default=5.0),
            fail_msg=dict(type="str", default=""),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    host, ports, timeout = module.params["host"], module.params["ports"], module.params["timeout"]
    if not host or any(ord(c) < 33 or ord(c) == 127 for c in host) or host.startswith("["):
        module.fail_json(msg="host %r must be a host name or an IP address without brackets or spaces" % host)
    if not ports or any(not 1 <= p <= 65535 for p in ports):
        module.fail_json(msg="ports must be TCP ports (1-65535), got %r" % (ports,))
    if not 0 < timeout <= 600:
        module.fail_json(msg="timeout must be more than 0 and at most 600 seconds, got %r" % timeout)
    result = probe_all(host, ports, timeout)
    if module.params["fail_msg"] and not result["reachable"]:
        module.fail_json(msg="%s %s (each port's state: %s): a firewall drops them or there is no route. Open them "
                         "between the nodes (nothing was changed)."
                         % (module.params["fail_msg"].strip(), ", ".join(str(p) for p in result["blocked"]),
                            json.dumps(result["ports"], sort_keys=True)), changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
