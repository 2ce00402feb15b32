#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Benchmark a running SGLang server through its OpenAI-compatible endpoint (streaming)
version_added: 0.1.0
description:
  - Sends a bounded number of streaming requests (O(num_requests)) at a given concurrency (O(concurrency)) to
    the server's C(/v1/completions) (or C(/v1/chat/completions)), each asking for exactly O(output_len) tokens
    (C(ignore_eos)), with prompts of O(input_len) words or the lines of O(prompt_file).
  - Returns output tokens per second, requests per second, time to first token (TTFT) and inter-token latency
    (ITL) as p50/p90/p99 in milliseconds, the errors, and, when speculative decoding is on and the server runs
    with C(--enable-metrics), the acceptance length from SGLang's C(sglang:spec_accept_length) metric.
  - Runs on the managed host with Python's standard library only (nothing to install there).
  - Fails with a clear message when the server cannot be reached, is not ready, or refuses the API key
    (HTTP 401), before any benchmark request is sent. Failed single requests are counted in C(errors);
    O(max_errors) decides when they fail the task.
  - The benchmark only reads; it never reports a change. Speed numbers belong in a benchmark record
    (see docs/observability.md), not in an assertion.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  url:
    description: Base URL of the server (without C(/v1)).
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: "The server's C(--api-key); sent as C(Authorization: Bearer). Never logged."
    type: str
    default: ""
  model:
    description: Model name in the requests; the first model of C(/v1/models) when empty.
    type: str
    default: ""
  num_requests:
    description: Number of requests in all.
    type: int
    default: 60
  concurrency:
    description: Requests in flight at once.
    type: int
    default: 30
  input_len:
    description:
      - Prompt length in words (C(hello) repeated; one token each in the tokenizers of the models served here).
        Ignored with O(prompt_file).
    type: int
    default: 1024
  output_len:
    description: Tokens asked for per request (C(max_tokens), with C(ignore_eos)).
    type: int
    default: 256
  prompt_file:
    description:
      - File on the managed host with one prompt per line (empty lines skipped); used in turn.
    type: path
  api:
    description: C(completions) (C(/v1/completions)) or C(chat) (C(/v1/chat/completions)).
    type: str
    default: completions
    choices: [completions, chat]
  timeout:
    description: Seconds a single request may take.
    type: float
    default: 600
  metrics:
    description: Read C(sglang:spec_accept_length) from C(/metrics) after the run.
    type: bool
    default: true
  max_errors:
    description: Fail when more requests than this failed. V(-1) never fails on request errors.
    type: int
    default: 0
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
seealso:
  - module: gpuserve.sglang.sglang_service
"""

EXAMPLES = r"""
- name: The operators' benchmark (concurrency 30)
  gpuserve.sglang.sglang_bench:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    num_requests: 90
    concurrency: 30
    input_len: 1024
    output_len: 256
  register: bench

- name: Show it
  ansible.builtin.debug:
    msg: "{{ bench.summary }}"
"""

RETURN = r"""
output_throughput:
  description: Output tokens per second over the run (all output tokens / wall time).
  returned: success
  type: float
  sample: 759.3
request_throughput:
  description: Completed requests per second.
  returned: success
  type: float
  sample: 2.97
ttft_ms:
  description: Time to first token, milliseconds (keys p50, p90, p99, mean; null without completed requests).
  returned: success
  type: dict
  sample: {p50: 412.0, p90: 980.5, p99: 1201.3, mean: 500.1}
itl_ms:
  description: Inter-token latency (gap between text chunks), milliseconds (keys p50, p90, p99, mean).
  returned: success
  type: dict
  sample: {p50: 38.1, p90: 45.0, p99: 61.2, mean: 39.4}
accept_length:
  description: Mean of C(sglang:spec_accept_length) from C(/metrics) after the run; null when absent.
  returned: success
  type: float
  sample: 2.41
completed:
  description: Requests that streamed to the end.
  returned: success
  type: int
errors:
  description: Requests that failed.
  returned: success
  type: int
error_messages:
  description: The first few request errors.
  returned: success
  type: list
  elements: str
output_tokens:
  description: Output tokens of the completed requests (from the server's usage, else text chunks).
  returned: success
  type: int
prompt_tokens:
  description: Prompt tokens as the server counted them (null when it sends no usage).
  returned: success
  type: int
duration_s:
  description: Wall time of the run in seconds.
  returned: success
  type: float
model:
  description: The model name used.
  returned: success
  type: str
url:
  description: The base URL.
  returned: success
  type: str
api:
  description: The API used.
  returned: success
  type: str
num_requests:
  description: As given.
  returned: success
  type: int
concurrency:
  description: As given.
  returned: success
  type: int
input_len:
  description: As given (null with a prompt file).
  returned: success
  type: int
output_len:
  description: As given.
  returned: success
  type: int
summary:
  description: One line.
  returned: success
  type: str
  sample: "90/90 requests at concurrency 30: 759.3 output tok/s, 2.966 req/s, TTFT p50 412.0 ms, ITL p50 38.1 ms"
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import module_secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils import _bench


def main():
    module = QuietModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", default="", no_log=True),
            model=dict(type="str", default=""),
            num_requests=dict(type="int", default=60),
            concurrency=dict(type="int", default=30),
            input_len=dict(type="int", default=1024),
            output_len=dict(type="int", default=256),
            prompt_file=dict(type="path"),
            api=dict(type="str", default="completions", choices=["completions", "chat"]),
            timeout=dict(type="float", default=600),
            metrics=dict(type="bool", default=True),
            max_errors=dict(type="int", default=0),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    # every secret its options carry, registered with the core's masking API (2.22+; _secrets.module_secrets)
    module_secrets(module.params, module.argument_spec)
    params = module.params
    lines = None
    if params["prompt_file"]:
        try:
            with open(params["prompt_file"], encoding="utf-8") as handle:
                lines = [line.rstrip("\n") for line in handle if line.strip()]
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot read prompt_file %s: %s" % (params["prompt_file"], exc))
        if not lines:
            module.fail_json(msg="prompt_file %s has no prompts" % params["prompt_file"])
    try:
        result = _bench.run(params["url"], api_key=params["api_key"], model=params["model"],
                            num_requests=params["num_requests"], concurrency=params["concurrency"],
                            input_len=params["input_len"], output_len=params["output_len"],
                            prompt_file_lines=lines, api=params["api"], timeout=params["timeout"],
                            metrics=params["metrics"])
    except _bench.BenchError as exc:
        module.fail_json(msg=str(exc))
    if 0 <= params["max_errors"] < result["errors"]:
        module.fail_json(msg="%d of %d benchmark requests failed: %s" % (
            result["errors"], result["num_requests"], "; ".join(result["error_messages"])), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
