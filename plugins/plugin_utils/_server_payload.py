# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server role's seam (issue 47): what the module gpuserve.sglang.sglang_server takes, computed ONCE on the
controller from the role's variables and the preflight's host read, by the action plugin of the same name.

The role's task hands the action plugin a handful of options (the unit, the step, the group's verdict) and
``role_inputs`` (the host read, the rendered unit, the launcher's text). Everything else is read here, each variable
once, and derived in Python: the effective flags, command line and memory plan's inputs are the preflight's, computed
once for the host's release (``_server_flags``, plugin_utils/_server_flags.py: the Qwen profile's release-only flags
are in both the ExecStart and the plan), then the environment and secrets files' text, the
files the server reads, the install record of the venv the unit runs, the answers gate's identity, the record's
fields. ``payload()`` is a pure function of a variable reader: tests/unit/plugins/plugin_utils/test_server_payload.py.
"""

from __future__ import annotations

from ansible.plugins.filter.core import to_bool

from ansible_collections.gpuserve.sglang.plugins.filter import server_role

# The role's variables the payload reads (resolved once each by the action plugin, as the task's templar sees them).
ROLE_VARS = (
    "sglang_unit_dir", "sglang_env_file", "sglang_secrets_file", "sglang_api_key", "sglang_admin_api_key",
    "sglang_user", "sglang_launch_script", "sglang_config_dir", "sglang_backup_dir", "sglang_nccl_env_file",
    "sglang_install_record", "sglang_backup_keep", "sglang_last_good_keeps_secrets", "sglang_rollback",
    "sglang_lease_dir", "sglang_restart_timeout", "sglang_health_url", "sglang_verify_expect",
    "sglang_verify_extra_fail_patterns", "sglang_stop_processes", "sglang_stop_processes_timeout", "sglang_free_gpus",
    "sglang_nvidia_smi_dir", "sglang_server_nodes", "sglang_bench_gate", "sglang_bench_url", "sglang_bench_requests",
    "sglang_bench_concurrency", "sglang_bench_input_len", "sglang_bench_output_len", "sglang_bench_prompt_file",
    "sglang_bench_timeout", "sglang_bench_threshold_pct", "sglang_bench_baseline_tok_s", "sglang_answers_gate",
    "sglang_answers_url", "sglang_answers_prompts", "sglang_answers_max_tokens", "sglang_answers_repeat",
    "sglang_answers_allowed_mismatches", "sglang_answers_host_tier", "sglang_answers_evict_tokens",
    "sglang_answers_accept_release", "sglang_answers_file", "sglang_record_file", "sglang_record_json_file",
    "sglang_record_history_dir", "sglang_record_history", "sglang_change_reason", "sglang_profile", "sglang_args",
    "sglang_launcher", "sglang_unit_environment", "sglang_cuda_home", "sglang_venv", "inventory_hostname",
    "sglang_weight_cache", "sglang_weight_cache_service_name", "sglang_weight_cache_timeout",
    # the role's own derived values (roles/server/vars/main.yml), each read once
    "_server_flags", "_server_env",
)
# Read when defined, else this value (set by a play or another role, not by the server role's defaults).
OPTIONAL_VARS = {"cuda_version": "", "sglang_memory_plan": {}, "rollout_behind_routers": False}


def payload(read, name, host, unit_text, launcher_text):
    """The module's options for the unit ``name``: ``read(var)`` gives a role variable's value (ROLE_VARS, and
    OPTIONAL_VARS with their default), ``host`` is the preflight's host read, ``unit_text`` the rendered unit and
    ``launcher_text`` the launcher's source ('' without a launcher script)."""
    v = dict((key, read(key)) for key in ROLE_VARS)
    v.update((key, read(key, default)) for key, default in OPTIONAL_VARS.items())
    host = host if isinstance(host, dict) else {}
    # the flags as the preflight computed them once for the host's release (plugin_utils/_server_flags.py, the
    # role's _server_flags): never computed again here
    flags = dict(v["_server_flags"] or {})
    args, plan, cmdline = dict(flags.get("args") or {}), dict(flags.get("plan") or {}), flags.get("cmdline")
    keys = {"api-key": v["sglang_api_key"], "admin-api-key": v["sglang_admin_api_key"]}
    nvidia_smi = "%s/nvidia-smi" % v["sglang_nvidia_smi_dir"]
    nodes = list(v["sglang_server_nodes"] or [])
    launch_script = v["sglang_launch_script"] or ""
    # the Weight Cache Daemon's unit (roles/weight_cache): the server's companion, and a start that also starts it
    # (its ExecStartPre) may wait for its load too
    weight_cache = bool(to_bool(v["sglang_weight_cache"]))  # Ansible's own | bool
    companions = ["%s.service" % v["sglang_weight_cache_service_name"]] if weight_cache else []
    timeout = int(v["sglang_restart_timeout"] or 0) + (int(v["sglang_weight_cache_timeout"] or 0) if weight_cache else 0)
    return {
        "unit": {"path": "%s/%s.service" % (v["sglang_unit_dir"], name), "content": unit_text},
        "env": {"path": v["sglang_env_file"], "content": server_role.sglang_server_envfile(v["_server_env"])},
        "secrets": {"path": v["sglang_secrets_file"], "content": server_role.sglang_server_secrets(keys),
                    "group": v["sglang_user"] or "root"},
        "launcher": {"path": launch_script, "content": launcher_text if launch_script else ""},
        "dirs": [{"path": v["sglang_config_dir"], "mode": "0755"}, {"path": v["sglang_backup_dir"], "mode": "0700"},
                 {"path": launch_script.rpartition("/")[0], "mode": "0755"}],
        "reads": server_role.sglang_server_reads(host, v["sglang_nccl_env_file"]),
        "install_record": server_role.sglang_server_install_record(host, v["sglang_install_record"]),
        "backup_dir": v["sglang_backup_dir"],
        "backup_keep": v["sglang_backup_keep"],
        "keep_secrets": v["sglang_last_good_keeps_secrets"],
        "rollback": v["sglang_rollback"],
        "api_key": v["sglang_api_key"],
        "secrets_to_mask": [key for key in (v["sglang_api_key"], v["sglang_admin_api_key"]) if key],
        "host_name": v["inventory_hostname"],
        "lock_dir": v["sglang_lease_dir"],
        "companion_units": companions,
        "service": {"timeout": timeout, "health_url": v["sglang_health_url"],
                    "expect": v["sglang_verify_expect"], "extra_fail_patterns": v["sglang_verify_extra_fail_patterns"]},
        "stop_processes": {"match": v["sglang_stop_processes"], "timeout": v["sglang_stop_processes_timeout"]},
        "free_gpus": {"enabled": v["sglang_free_gpus"], "nvidia_smi": nvidia_smi},
        "gates_here": nodes[:1] in ([], [v["inventory_hostname"]]),
        "bench": {"enabled": v["sglang_bench_gate"], "url": v["sglang_bench_url"],
                  "num_requests": v["sglang_bench_requests"], "concurrency": v["sglang_bench_concurrency"],
                  "input_len": v["sglang_bench_input_len"], "output_len": v["sglang_bench_output_len"],
                  "prompt_file": v["sglang_bench_prompt_file"], "timeout": v["sglang_bench_timeout"],
                  "threshold_pct": v["sglang_bench_threshold_pct"],
                  "baseline_tok_s": v["sglang_bench_baseline_tok_s"]},
        "answers": {"enabled": v["sglang_answers_gate"], "url": v["sglang_answers_url"],
                    "prompts": v["sglang_answers_prompts"], "max_tokens": v["sglang_answers_max_tokens"],
                    "repeat": v["sglang_answers_repeat"], "allowed_mismatches": v["sglang_answers_allowed_mismatches"],
                    "server_args": args, "host_tier": v["sglang_answers_host_tier"], "hicache": bool(plan.get("hicache")),
                    "evict_tokens": v["sglang_answers_evict_tokens"],
                    "accept_release": v["sglang_answers_accept_release"],
                    "drained": v["rollout_behind_routers"], "state_file": v["sglang_answers_file"],
                    "identity": server_role.sglang_server_identity(host, args)},
        "record": {"record_md_path": v["sglang_record_file"], "record_json_path": v["sglang_record_json_file"],
                   "record_history_dir": v["sglang_record_history_dir"], "keep": v["sglang_record_history"],
                   "service": name, "host": v["inventory_hostname"], "change_reason": v["sglang_change_reason"],
                   "profile": v["sglang_profile"], "args": v["sglang_args"], "cmdline": cmdline,
                   "health_url": v["sglang_health_url"], "launcher": v["sglang_launcher"],
                   "secrets_file": v["sglang_secrets_file"], "secret_keys": [key for key, value in keys.items() if value],
                   "unit_environment": v["sglang_unit_environment"], "env_file": v["sglang_env_file"],
                   "env": v["_server_env"], "nccl_env_file": v["sglang_nccl_env_file"],
                   "install_record": v["sglang_install_record"], "backup_dir": v["sglang_backup_dir"],
                   "cuda_home": v["sglang_cuda_home"], "cuda_version": v["cuda_version"] or "",
                   "nvidia_smi": nvidia_smi, "memory_plan": v["sglang_memory_plan"] or {},
                   "hicache_expected": bool(plan.get("hicache")), "python": host.get("python") or ""},
        "venv_link": {"versioned": host.get("versioned_venv") or "", "link": v["sglang_venv"]},
    }
