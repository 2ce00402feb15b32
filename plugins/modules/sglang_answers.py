#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_answers
short_description: The correctness gate - greedy answers to fixed prompts, compared with the recorded baseline
version_added: 0.4.0
description:
  - Sends each of O(prompts) to SGLang's native C(/generate) with C(temperature 0) and C(max_new_tokens)
    O(max_tokens), one request at a time, O(repeat) times (the later rounds come through the radix cache, the GPU
    tier). With O(host_tier), one more round reads HiCache's host tier - distinct prefixes of O(evict_tokens)
    tokens push the prompts' KV out of the GPU tier first (where wrong answers were reported,
    sgl-project/sglang#39830).
  - The baseline is keyed by the model (O(identity) without its C(release)), the flags of O(server_args) that
    change greedy output (tensor/pipeline/data/expert parallelism, KV-cache dtype, attention backends,
    quantization, dtype, MoE and sampling backends, deterministic inference, speculative decoding), the prompts and
    O(max_tokens). The first verified start records the answers in O(state_file) (changed); every later start is
    compared with them, exactly, a new SGLang release with the last release's answers (carried to the new release
    when they match). More than O(allowed_mismatches) prompts answering otherwise (each counted once over the
    rounds) fail the task (inside the server role's restart block, that failure takes the rollback), unless the
    release differs from the baseline's and is exactly O(accept_release), whose answers then become the baseline.
  - O(conditions) says whether greedy decoding was reproducible - V(drained) (out of every router), V(deterministic)
    (C(--enable-deterministic-inference)) or V(live) (clients may reach the server; the result and a failure say
    so).
  - The logic, and the one owner of O(state_file), is C(plugins/module_utils/_answers.py); standard library only
    on the host.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  url:
    description: Base URL of the server (without C(/generate)).
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: "The server's C(--api-key); sent as C(Authorization: Bearer). Never logged."
    type: str
    default: ""
  prompts:
    description: The fixed prompts, in order (a changed list is a new baseline).
    type: list
    elements: str
    required: true
  max_tokens:
    description: Tokens per answer (C(max_new_tokens)); short answers keep greedy decoding's rare ties out.
    type: int
    default: 32
  repeat:
    description: Rounds over the prompts; every round must give the recorded answers.
    type: int
    default: 2
  identity:
    description:
      - What must give the same answers - the role passes the model path, the SGLang release and the sha256 of the
        model's config.json. A new identity records a new baseline.
    type: dict
    required: true
  state_file:
    description: The baselines file on the host (JSON, mode 0600, written atomically).
    type: path
    required: true
  allowed_mismatches:
    description: Answers (over all rounds) that may differ before the gate fails.
    type: int
    default: 0
  server_args:
    description: The server's flags (the server role's, names without dashes); those that change greedy output join
      the baseline's identity (RV(key)).
    type: dict
    default: {}
  host_tier:
    description: Run the round that reads HiCache's host tier (the server runs with C(--enable-hierarchical-cache)).
    type: bool
    default: false
  evict_tokens:
    description: Tokens of distinct prefix pushed through before the host-tier round; V(0) means 1.25 x the GPU KV
      pool (C(max_total_num_tokens) of C(/get_server_info)).
    type: int
    default: 0
  evict_chunk_tokens:
    description: Tokens per request of that push (each request one new token).
    type: int
    default: 1024
  conditions:
    description: Under which conditions the gate runs (see the description).
    type: str
    choices: [drained, deterministic, live]
    default: live
  accept_release:
    description: The one new release whose differing answers are accepted as the new baseline.
    type: str
    default: ""
  invocation_id:
    description: The verified invocation, written with a new baseline.
    type: str
    default: ""
  timeout:
    description: Seconds a single request may take.
    type: float
    default: 300
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - Asks and compares; a baseline that would be recorded is reported as a change and not written.
  diff_mode:
    support: none
    details:
      - Reports the differing answers in C(mismatches), not as a diff.
seealso:
  - module: gpuserve.sglang.sglang_bench
"""

EXAMPLES = r"""
- name: Correctness gate after a verified start
  gpuserve.sglang.sglang_answers:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    prompts: ["The capital of France is", "def fibonacci(n):"]
    identity: {model: /models/Kimi-K2.5-INT4, release: 0.5.9}
    state_file: /etc/sglang/sglang-kimi.answers.json
"""

RETURN = r"""
baseline:
  description: C(recorded now ...) or C(recorded <when> (invocation <id>)).
  returned: success
  type: str
key:
  description: The baseline's key (from the identity, the prompts and O(max_tokens)).
  returned: always
  type: str
mismatches:
  description: Each differing answer - C(prompt) (index), C(round), C(expected), C(got) (first 120 characters).
  returned: always
  type: list
  elements: dict
answers_sha256:
  description: sha256 of the first round's answers (JSON).
  returned: always
  type: str
prompts:
  description: Number of prompts.
  returned: always
  type: int
conditions:
  description: V(drained), V(deterministic) or V(live) (O(conditions)).
  returned: always
  type: str
host_tier_round:
  description: Whether the round through HiCache's host tier ran (C(evicted_tokens) pushed through before it).
  returned: always
  type: bool
accepted_release:
  description: The release whose differing answers were accepted (O(accept_release)).
  returned: when accepted
  type: str
repeat:
  description: Rounds asked.
  returned: always
  type: int
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import module_secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils import _answers
from ansible_collections.gpuserve.sglang.plugins.module_utils._bench import BenchError


def main():
    module = QuietModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", default="", no_log=True),
            prompts=dict(type="list", elements="str", required=True),
            max_tokens=dict(type="int", default=32, no_log=False),
            repeat=dict(type="int", default=2),
            identity=dict(type="dict", required=True),
            state_file=dict(type="path", required=True),
            allowed_mismatches=dict(type="int", default=0),
            server_args=dict(type="dict", default={}),
            host_tier=dict(type="bool", default=False),
            evict_tokens=dict(type="int", default=0, no_log=False),
            evict_chunk_tokens=dict(type="int", default=1024, no_log=False),
            conditions=dict(type="str", choices=["drained", "deterministic", "live"], default="live"),
            accept_release=dict(type="str", default=""),
            invocation_id=dict(type="str", default=""),
            timeout=dict(type="float", default=300.0),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    # every secret its options carry, registered with the core's masking API (2.22+; _secrets.module_secrets)
    module_secrets(module.params, module.argument_spec)
    p = module.params
    if p["max_tokens"] < 1 or p["repeat"] < 1 or p["allowed_mismatches"] < 0 or p["evict_tokens"] < 0 \
            or p["evict_chunk_tokens"] < 16:
        module.fail_json(msg="max_tokens and repeat must be >= 1, allowed_mismatches and evict_tokens >= 0, "
                             "evict_chunk_tokens >= 16")
    identity = dict(p["identity"])
    identity["flags"] = _answers.output_flags(p["server_args"])
    try:
        result = _answers.gate(p["url"], p["prompts"], p["state_file"], identity, api_key=p["api_key"],
                               max_tokens=p["max_tokens"], repeat=p["repeat"],
                               allowed_mismatches=p["allowed_mismatches"], invocation_id=p["invocation_id"],
                               timeout=p["timeout"], check_mode=module.check_mode, host_tier=p["host_tier"],
                               evict_tokens=p["evict_tokens"], evict_chunk_tokens=p["evict_chunk_tokens"],
                               conditions=p["conditions"], accept_release=p["accept_release"])
    except (_answers.AnswersError, BenchError) as exc:
        module.fail_json(msg="correctness gate: %s" % exc)
    if result.pop("failed"):
        msg = result.pop("msg")
        module.fail_json(msg=msg, **result)
    if result.get("conditions") == "live":
        module.warn("correctness gate: ran under possible live traffic (no router drained the server, no "
                    "--enable-deterministic-inference); greedy answers batched with clients' requests may differ")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
