#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_workers
short_description: Take SGLang workers out of every sglang-router, drain them, put them back, or verify
version_added: "0.2.0"
description:
  - Talks to one or more sglang-router 0.3.2 instances through their worker API (C(GET /workers),
    C(DELETE /workers/<id>), C(POST /workers)); every action is done on B(every) router given.
  - V(drained) takes the O(workers) out of every router, then waits until each worker's own C(/metrics)
    says it holds no request (SGLang's C(sglang:num_running_reqs) + C(sglang:num_queue_reqs) and the
    disaggregation queues of a prefill or decode server, C(sglang:num_prefill_bootstrap_queue_reqs) (in 0.5.9
    C(sglang:num_prefill_prealloc_queue_reqs)), C(sglang:num_prefill_inflight_queue_reqs),
    C(sglang:num_decode_prealloc_queue_reqs), C(sglang:num_decode_transfer_queue_reqs)), at most O(drain_timeout)
    seconds; what was still in flight then is returned in RV(cut). Refused before anything changes when it
    would leave more than O(max_unavailable) workers of O(fleet) out of a router, or a router without a
    healthy worker.
  - V(present) waits until each worker answers its own C(/health) with 200, adds it to every router that does
    not list it, and waits until every router answers its readiness (O(router_ready_path)) 200 and lists every
    worker as healthy.
  - V(verified) changes nothing; every router answers its readiness 200 and lists every worker as healthy (waits up
    to O(timeout)). V(status) only reads.
  - V(reconciled) first puts back every worker of O(workers) that answers its own C(/health) with 200 but is not
    listed by a router (left out by an earlier failed re-add; RV(put_back) says so), then verifies as V(verified).
    V(drained) does the same for the rest of O(fleet) before its safety check, so a worker left out earlier never
    keeps capacity out.
  - A worker left out ON PURPOSE is never put back by either. V(held_out) records the O(workers) in
    O(held_out_file) (on the host the module runs on, each router host; the rollout does it when a rolled-back
    worker's old configuration did not verify). Such a worker counts as out for O(max_unavailable), is not waited
    for by V(verified) and V(reconciled) (RV(held_out) names it), and stays out until a run verifies it; V(present)
    (the re-add after a verified restart) or V(released) clear its record. V(held_out) and V(released) ask no
    router.
  - Each worker is named by its URL in O(workers) and O(fleet) and may be listed by the routers under one of its
    O(aliases); the drain removes the entry each router lists and returns it in RV(listed_as), which the re-add
    takes back. A batch worker no router lists while the routers list URLs that name no fleet worker is refused,
    naming those URLs, before anything changes.
  - A re-add answered "already exists" (a gateway still removing the old entry) is posted again once the old entry
    is gone, within O(timeout).
  - Runs where it is delegated (it needs HTTP to the routers and the workers), Python standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.action_plugin
attributes:
  check_mode:
    support: full
    details: V(status) and V(verified) only read; V(drained) and V(present) report what they would do.
  diff_mode:
    support: none
    details: Reports only; there is nothing to diff.
  platform:
    details: Runs where it is delegated (HTTP to the routers and the workers), Python standard library only.
  action:
    details: The action plugin turns inventory hosts (O(router_hosts), O(worker_hosts), O(fleet_hosts)) into URLs,
      aliases and PD kinds on the controller, writes RV(words) and decides a rescue (O(server_result)).
options:
  routers:
    description:
      - Base URLs of the routers, for example V(http://gw-1:30000).
      - Default is the URLs of O(router_hosts).
    type: list
    elements: str
    default: []
  router_hosts:
    description:
      - Inventory hosts of the routers; the action plugin sets O(routers) from each one's
        C(sglang_router_api_address) (else its name) and C(sglang_router_port) (else 30000).
    type: list
    elements: str
  worker_hosts:
    description:
      - Inventory hosts of the workers acted on; the action plugin sets O(workers) from them
        (P(gpuserve.sglang.sglang_worker_urls#filter)) and, for V(drained) and V(present), O(aliases) and O(kinds)
        (of O(fleet_hosts) when given), the task's own O(aliases) and O(kinds) taking precedence.
      - With V(drained), RV(words) names these hosts.
    type: list
    elements: str
  fleet_hosts:
    description: Inventory hosts of the fleet; the action plugin sets O(fleet) from them.
    type: list
    elements: str
  server_result:
    description:
      - With V(held_out), the result of M(gpuserve.sglang.sglang_server) for the worker (a rollout's rescue). When
        it says the unit serves a verified set (its C(serving_verified)), the
        worker is not held out and the module is not called; RV(readmit) and RV(words) say which.
    type: dict
  workers:
    description: Base URLs of the workers acted on, exactly as the routers list them (V(http://host:30000)).
    type: list
    elements: str
    default: []
  fleet:
    description:
      - Every worker URL of the fleet, for O(max_unavailable) (a fleet worker not listed healthy counts as out).
      - Default is O(workers).
    type: list
    elements: str
    default: []
  state:
    description: What to do (see the description).
    type: str
    choices: [drained, present, verified, reconciled, status, held_out, released]
    default: verified
  held_out_file:
    description:
      - The record of the workers held out on purpose (JSON, mode 0600, written atomically; its directory made
        when missing). Without it no worker is held out and V(held_out)/V(released) are refused.
    type: path
  reason:
    description: For V(held_out), why the workers are held out (kept in O(held_out_file)).
    type: str
    default: ""
  max_unavailable:
    description: At most this many fleet workers out of a router at once, the batch counted in.
    type: int
    default: 1
  drain_timeout:
    description: Seconds to wait for the in-flight requests of drained workers to reach zero.
    type: float
    default: 300
  timeout:
    description: Seconds for the routers to drop (V(drained)) or list healthy (V(present), V(verified)) the workers.
    type: float
    default: 120
  api_key:
    description: Bearer key sent to the routers' API, when they require one.
    type: str
  worker_api_key:
    description:
      - The key the workers require (their C(--api-key)), sent with each worker put back through the API so that
        the router passes it on to that worker (a worker added without one stays unreachable behind a key).
    type: str
  aliases:
    description:
      - Other URLs a worker may be listed by, keyed by its URL in O(workers) or O(fleet) (the filter
        P(gpuserve.sglang.sglang_worker_aliases#filter) builds them from the inventory; so does the action plugin
        from O(worker_hosts) or O(fleet_hosts)).
    type: dict
    default: {}
  listed_as:
    description:
      - For V(present), the URL each router listed each worker by before the drain (RV(listed_as) of the drain);
        that URL is the one put back.
    type: dict
    default: {}
  kinds:
    description:
      - Behind a gateway in PD mode (issue 25), each worker's kind, keyed by its URL in O(workers) or O(fleet),
        C(worker_type) (V(prefill), V(decode) or V(regular)) and a prefill server's C(bootstrap_port) (the action
        plugin builds them from each host's C(sglang_disaggregation_mode) with O(worker_hosts) or O(fleet_hosts)). A worker put back is
        posted with its kind (a gateway adds one without as a regular worker, which it never routes to in PD mode),
        and V(drained) refuses to take out the last healthy worker of either kind. A worker not given here is
        put back as the kind a router listed it as.
    type: dict
    default: {}
  router_ready_path:
    description:
      - The routers' readiness path, asked wherever a router must be serving (V(present), V(verified),
        V(reconciled)). Both pinned gateways (sglang-router 0.3.2, SMG 1.13.0) serve C(/readiness), which answers
        503 while the gateway stops or has no healthy worker; their C(/health) stays 200 then.
    type: str
    default: /readiness
  worker_health_path:
    description: The workers' health path.
    type: str
    default: /health
  worker_metrics_path:
    description: The workers' Prometheus path (SGLang with C(--enable-metrics)).
    type: str
    default: /metrics
  poll_interval:
    description: Seconds between polls.
    type: float
    default: 0.5
notes:
  - Without C(--enable-metrics) on the workers the in-flight count is unknown; the drain then waits the whole
    O(drain_timeout) and RV(metrics_unavailable) names the workers.
  - Check mode reports what would change and changes nothing.
"""

EXAMPLES = r"""
- name: Take the batch out of every router and wait for its requests to finish
  gpuserve.sglang.sglang_router_workers:
    routers: [http://gw-1:30000, http://gw-2:30000]
    workers: [http://gpu-3:30000]
    fleet: [http://gpu-1:30000, http://gpu-2:30000, http://gpu-3:30000, http://gpu-4:30000]
    state: drained
    drain_timeout: 600
  delegate_to: gw-1
  run_once: true

- name: Put it back once it verified
  gpuserve.sglang.sglang_router_workers:
    routers: [http://gw-1:30000, http://gw-2:30000]
    workers: [http://gpu-3:30000]
    state: present

- name: The same drain by inventory hosts (URLs, aliases and PD kinds from their variables)
  gpuserve.sglang.sglang_router_workers:
    router_hosts: "{{ groups['sglang_routers'] }}"
    worker_hosts: [gpu-3]
    fleet_hosts: "{{ groups['sglang_servers'] }}"
    state: drained
  delegate_to: gw-1
  run_once: true
  register: drained

- name: Say what was drained
  ansible.builtin.debug:
    msg: "{{ drained.words }}"
  run_once: true
"""

RETURN = r"""
routers:
  description: Each router's workers after the action, by URL (C(id), C(is_healthy), C(load)).
  returned: always
  type: dict
cut:
  description: Drained workers that still had requests in flight when O(drain_timeout) ran out, with the count.
  returned: state=drained
  type: dict
in_flight_at_end:
  description: Each drained worker's in-flight count when the drain ended (null when its metrics were unavailable).
  returned: state=drained
  type: dict
drain_seconds:
  description: How long the drain waited.
  returned: state=drained
  type: float
metrics_unavailable:
  description: Drained workers whose /metrics did not answer.
  returned: state=drained
  type: list
kinds:
  description: For V(drained), the kind of each worker of the batch behind a gateway in PD mode (given in O(kinds),
    else as a router listed it), to hand to the V(present) that puts the batch back.
  returned: state is drained
  type: dict
  sample: {"http://pd-p1:30000": {worker_type: prefill, bootstrap_port: 8998}}
listed_as:
  description: By router, the URL it listed each worker of the batch by before the drain.
  returned: state=drained
  type: dict
put_back:
  description: Workers that answered their own health check but were not listed, put back, with the routers.
  returned: always
  type: dict
held_out:
  description: The workers held out on purpose (O(held_out_file)) among those acted on or of the fleet; never put back.
  returned: always except state=status
  type: list
would_put_back:
  description: In check mode, the workers V(reconciled) would put back.
  returned: state=reconciled and check mode
  type: list
log:
  description: What was removed from or added to which router.
  returned: always
  type: list
seconds:
  description: Time the module took.
  returned: always
  type: float
words:
  description:
    - "For V(drained) with O(worker_hosts), the line a rollout prints (C(DRAINED <hosts>: out of N router(s), ...))."
    - With O(server_result), what becomes of the worker (back in every router, or held out and why).
  returned: state=drained with worker_hosts, or with server_result
  type: str
readmit:
  description: With O(server_result), whether the worker serves a verified set (not held out; put it back).
  returned: with server_result
  type: bool
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import module_secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._router import RouterError, run


def main():
    module = QuietModule(
        argument_spec=dict(
            routers=dict(type="list", elements="str", default=[]),
            router_hosts=dict(type="list", elements="str"),   # the action plugin's (it sets the URLs from them)
            worker_hosts=dict(type="list", elements="str"),
            fleet_hosts=dict(type="list", elements="str"),
            server_result=dict(type="dict"),
            workers=dict(type="list", elements="str", default=[]),
            fleet=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=["drained", "present", "verified", "reconciled", "status", "held_out",
                                            "released"], default="verified"),
            held_out_file=dict(type="path"),
            reason=dict(type="str", default=""),
            max_unavailable=dict(type="int", default=1),
            drain_timeout=dict(type="float", default=300),
            timeout=dict(type="float", default=120),
            api_key=dict(type="str", no_log=True),
            worker_api_key=dict(type="str", no_log=True),
            aliases=dict(type="dict", default={}),
            listed_as=dict(type="dict", default={}),
            kinds=dict(type="dict", default={}),
            router_ready_path=dict(type="str", default="/readiness"),
            worker_health_path=dict(type="str", default="/health"),
            worker_metrics_path=dict(type="str", default="/metrics"),
            poll_interval=dict(type="float", default=0.5),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    # every secret its options carry, registered with the core's masking API (2.22+; _secrets.module_secrets)
    module_secrets(module.params, module.argument_spec)
    params = module.params
    for name in ("routers", "workers", "fleet"):
        for url in params[name]:
            if not url.startswith(("http://", "https://")):
                module.fail_json(msg="%s: %r is not an http(s) URL" % (name, url))
    for worker, names in params["aliases"].items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            module.fail_json(msg="aliases: %r must map to a list of URLs" % worker)
        for url in [worker] + names:
            if not url.startswith(("http://", "https://")) or any(ord(c) < 32 for c in url):
                module.fail_json(msg="aliases: %r is not an http(s) URL" % url)
    for router, names in params["listed_as"].items():
        if not isinstance(names, dict):
            module.fail_json(msg="listed_as: %r must map worker URLs to listed URLs" % router)
        for url in list(names) + list(names.values()):
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                module.fail_json(msg="listed_as: %r is not an http(s) URL" % (url,))
    for worker, kind in params["kinds"].items():
        if (not isinstance(kind, dict) or kind.get("worker_type", "regular") not in ("prefill", "decode", "regular")
                or not (kind.get("bootstrap_port") is None or str(kind.get("bootstrap_port")).isdigit())):
            module.fail_json(msg="kinds: %r must map to {worker_type: prefill|decode|regular, bootstrap_port: "
                                 "a port or null}, got %r" % (worker, kind))
    if not params["routers"]:
        module.fail_json(msg="routers: at least one router URL is needed")
    if params["max_unavailable"] < 1:
        module.fail_json(msg="max_unavailable must be at least 1, got %s" % params["max_unavailable"])
    if params["state"] == "drained" and len(set(params["workers"])) > params["max_unavailable"]:
        module.fail_json(msg="%d workers asked to drain at once, more than max_unavailable=%d"
                         % (len(set(params["workers"])), params["max_unavailable"]))
    for name in ("drain_timeout", "timeout", "poll_interval"):
        if params[name] <= 0:
            module.fail_json(msg="%s must be a positive number of seconds, got %s" % (name, params[name]))
    try:
        result = run(params, check_mode=module.check_mode)
    except RouterError as exc:
        module.fail_json(msg=str(exc))
    if result.get("held_out") and params["state"] in ("verified", "reconciled", "drained"):
        module.warn("held out on purpose until a run verifies them (%s): %s"
                    % (params["held_out_file"], ", ".join(result["held_out"])))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
