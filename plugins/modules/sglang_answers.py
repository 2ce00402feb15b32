#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_answers
short_description: The correctness gate - greedy answers to fixed prompts, compared with the first verified start's
version_added: 0.4.0
description:
  - Sends each of O(prompts) to SGLang's native C(/generate) with C(temperature 0) and C(max_new_tokens)
    O(max_tokens), one request at a time, O(repeat) times (the later rounds come through the radix cache and
    HiCache's host tier, where wrong answers were reported, sgl-project/sglang#39830).
  - The first verified start of a model and release records the answers in O(state_file) (changed); every later
    start with the same O(identity), prompts and O(max_tokens) is compared with them, exactly. More than
    O(allowed_mismatches) differing answers fail the task (inside the server role's restart block, that failure
    takes the rollback).
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
repeat:
  description: Rounds asked.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _answers
from ansible_collections.gpuserve.sglang.plugins.module_utils._bench import BenchError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", default="", no_log=True),
            prompts=dict(type="list", elements="str", required=True),
            max_tokens=dict(type="int", default=32, no_log=False),
            repeat=dict(type="int", default=2),
            identity=dict(type="dict", required=True),
            state_file=dict(type="path", required=True),
            allowed_mismatches=dict(type="int", default=0),
            invocation_id=dict(type="str", default=""),
            timeout=dict(type="float", default=300.0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["max_tokens"] < 1 or p["repeat"] < 1 or p["allowed_mismatches"] < 0:
        module.fail_json(msg="max_tokens and repeat must be >= 1, allowed_mismatches >= 0")
    try:
        result = _answers.gate(p["url"], p["prompts"], p["state_file"], p["identity"], api_key=p["api_key"],
                               max_tokens=p["max_tokens"], repeat=p["repeat"],
                               allowed_mismatches=p["allowed_mismatches"], invocation_id=p["invocation_id"],
                               timeout=p["timeout"], check_mode=module.check_mode)
    except (_answers.AnswersError, BenchError) as exc:
        module.fail_json(msg="correctness gate: %s" % exc)
    if result.pop("failed"):
        msg = result.pop("msg")
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
