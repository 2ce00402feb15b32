# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server role's computations in Python, called by the collection's action plugins through plugins/plugin_utils
(_server_flags.py, _server_preflight.py, _server_payload.py, _server_group.py): the effective flags and command
line, the memory plan's inputs (sglang_plan_inputs: SGLang's own defaults filling what is not set, the one table
per release), the preflight's refusals, the files a server reads, the group's verdict (module_utils/_server/group.py).

Published as filters too; the role-private ones are deprecated (meta/runtime.yml, removal in 3.0.0) and no role or
playbook calls them. Pure functions, no host access (tests/unit/plugins/filter/test_server_role.py).
"""

from __future__ import annotations

import posixpath

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import to_bool, to_nice_yaml

from ansible_collections.gpuserve.sglang.plugins.filter.server_inputs import sglang_input_problems
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import group as _group
from ansible_collections.gpuserve.sglang.plugins.module_utils import _weight_cache
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_lease
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import (
    sglang_args_merge, sglang_args_problems, sglang_argv, sglang_pd_server_args, sglang_release_args)
from ansible_collections.gpuserve.sglang.plugins.filter.systemd import sglang_cmdline, sglang_envfile
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_nodes import sglang_node_args
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_defaults import sglang_defaults

string_types = (str,)


def _bool(value):
    """Ansible's own ``| bool`` (the role's YAML used it): yes/on/true/1 in any case, the same for the others."""
    return bool(to_bool(value))


def _int(value):
    """Jinja's ``| int``, as the role's YAML had it: "8.0" is 8 and a value that is no number is 0, never an error
    (a bad flag is refused later by the preflight, with its name: not a failed templating here)."""
    try:
        return int(value, 10) if isinstance(value, string_types) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def _float(value):
    """Jinja's ``| float``: 0.0 for a value that is no number (see _int)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def sglang_server_args(inputs, hostvars=None):
    """The server's effective flags: ``inputs`` = {profile (the profile's flags), user (sglang_args), model_path,
    nodes (sglang_server_nodes), host (inventory_hostname), dist_init_port, pd_mode, bootstrap_port}: the model
    path first, then a server over several hosts' --nnodes/--node-rank/--dist-init-addr and a PD server's flags,
    the profile's, the user's on top (sglang_args_merge). With ``release_args`` (the profile's flags for some
    releases only) and ``release`` / ``cpus`` (the host's), those are merged after the user's where they apply
    (sglang_release_args)."""
    if not isinstance(inputs, dict):
        raise AnsibleFilterError("sglang_server_args: the inputs must be a mapping, got %r" % (inputs,))
    first = {"model-path": inputs.get("model_path", "")}
    first.update(sglang_node_args(inputs.get("nodes") or [], hostvars or {}, inputs.get("host", ""),
                                  inputs.get("dist_init_port", 50000)))
    first.update(sglang_pd_server_args(inputs.get("pd_mode"), inputs.get("bootstrap_port", 8998)))
    user = inputs.get("user") or {}
    args = sglang_args_merge(inputs.get("profile") or {}, user, first=first)
    entries = inputs.get("release_args") or []
    if entries:
        tp = sglang_plan_inputs(args, inputs.get("release") or "")["tp"]
        extra = sglang_release_args(entries, release=inputs.get("release") or "", cpus=inputs.get("cpus") or 0, tp=tp,
                                    present=list(user))
        args = sglang_args_merge(args, extra)
    return _with_features(args, inputs, hostvars, user)


def _with_features(args, inputs, hostvars, user):
    """``args`` with the flags the role's own variables add (issue 49: sglang_weight_cache's client flags,
    sglang_weight_prefetch's), by the fact sglang_server_features (flags.yml) of ``inputs``' host; a flag the user
    set in sglang_args stays the user's."""
    facts = (hostvars or {}).get(inputs.get("host", "")) if hasattr(hostvars, "get") else None
    features = facts.get("sglang_server_features") if hasattr(facts, "get") else None
    if not isinstance(features, dict):
        return args
    added = sglang_server_feature_args(features, args, inputs.get("release") or "",
                                       (facts.get("sglang_memory_plan") if hasattr(facts, "get") else None))[0]
    added = dict((k, v) for k, v in added.items() if k not in set(sglang_args_merge({}, user or {})))
    return sglang_args_merge(args, added) if added else args


def sglang_server_feature_args(features, args, release="", plan=None):
    """(flags, notes) that sglang_server_features ({weight_cache, weight_cache_timeout, weight_prefetch,
    weight_prefetch_headroom_gb}) add to the effective flags ``args`` for ``release``: the weight cache's client
    flags (its refusals are the weight_cache role's) and SGLang's checkpoint prefetch where it applies."""
    features = features if isinstance(features, dict) else {}
    flags, notes = {}, []
    if _bool(features.get("weight_cache", False)):
        flags.update(_weight_cache.client_flags(args, features.get("weight_cache_timeout", 1800)))
    prefetch, why = _weight_cache.prefetch_decision(
        features.get("weight_prefetch", False), release, plan, sglang_plan_inputs(args, release)["tp"],
        features.get("weight_prefetch_headroom_gb", 16))
    flags.update(prefetch)
    if why:
        notes.append(why)
    return flags, notes


def sglang_plan_inputs(args, release=""):
    """The options of gpuserve.sglang.sglang_memory_plan from the effective flags (``args``, as sglang_args_merge
    gives them): a flag left out takes SGLang's own default for ``release`` (the one table), and where SGLang
    computes the value at start-up, the collection's planning assumption (sglang_defaults planning=true)."""
    if not isinstance(args, dict):
        raise AnsibleFilterError("sglang_plan_inputs: the flags must be a mapping, got %r" % (args,))
    d = sglang_defaults(release or "", planning=True)
    spec = args.get("speculative-algorithm") or ""
    strategy = args.get("mamba-scheduler-strategy", args.get("mamba-radix-cache-strategy", ""))
    return {
        "tp": _int(args.get("tp", d["tp_size"])),
        "mem_fraction_static": _float(args.get("mem-fraction-static", d["mem_fraction_static"])),
        "hicache": _bool(args.get("enable-hierarchical-cache", d["enable_hierarchical_cache"])),
        "ratio": _float(args.get("hicache-ratio", d["hicache_ratio"])),
        "size_gb": _int(args.get("hicache-size", d["hicache_size"])),
        "page_size": _int(args.get("page-size", d["page_size"])),
        "kv_dtype": args.get("kv-cache-dtype", d["kv_cache_dtype"]),
        "model_path": str(args.get("model-path", "")),
        "draft_model_path": str(args.get("speculative-draft-model-path", "") or ""),
        # a hybrid model's state pool (sglang_memory_plan option hybrid; unused for other models)
        "hybrid": {
            "speculative_num_draft_tokens": _int(args.get("speculative-num-draft-tokens", 0)) if spec else 0,
            "max_running_requests": args.get("max-running-requests", d["max_running_requests"]),
            "max_mamba_cache_size": args.get("max-mamba-cache-size"),
            "mamba_full_memory_ratio": args.get("mamba-full-memory-ratio"),
            "extra_buffer": strategy == "extra_buffer",
            "disable_radix_cache": _bool(args.get("disable-radix-cache", d["disable_radix_cache"])),
            "context_len": args.get("context-length", d["context_length"]),
        },
    }


def sglang_server_argv(inputs, hostvars=None):
    """SGLang's arguments (after ``-m <launcher>``): the effective flags (sglang_server_args) and the listening
    address, ``inputs``' listen_host and port."""
    args = sglang_server_args(inputs, hostvars)
    return sglang_argv(args) + ["--host", str(inputs.get("listen_host", "")), "--port", str(inputs.get("port", ""))]


def sglang_server_cmdline(inputs, hostvars=None):
    """The unit's ExecStart command line (without --config): ``inputs``' python, its launch_script when set,
    ``-m`` launcher, then sglang_server_argv; each word quoted as systemd reads it (sglang_cmdline)."""
    prefix = [str(inputs.get("python", ""))]
    if inputs.get("launch_script"):
        prefix.append(str(inputs["launch_script"]))
    prefix += ["-m", str(inputs.get("launcher", ""))]
    return sglang_cmdline(sglang_server_argv(inputs, hostvars), prefix=prefix)


def sglang_server_plan(inputs, hostvars=None):
    """sglang_plan_inputs of sglang_server_args(``inputs``, ``hostvars``), by the release ``inputs`` names."""
    return sglang_plan_inputs(sglang_server_args(inputs, hostvars), (inputs or {}).get("release") or "")


def sglang_server_models(args, profile_model=None, enabled=True):
    """The model preflight's items (sglang_host_facts option models.items): the model (with the profile's
    expectations: quantization, files) and the draft model when one is set; [] when the check is off."""
    if not _bool(enabled):
        return []
    args = args if isinstance(args, dict) else {}
    profile_model = profile_model if isinstance(profile_model, dict) else {}
    items = [{"path": str(args.get("model-path", "") or ""), "role": "model",
              "quantization": profile_model.get("quantization", ""), "files": profile_model.get("files", []),
              "model_impl": str(args.get("model-impl", "") or "")}]
    draft = str(args.get("speculative-draft-model-path", "") or "")
    if draft:
        items.append({"path": draft, "role": "draft"})
    return items


def _with_python(role_inputs, python):
    """The role's inputs with the interpreter the host read found, where the former preflight named it (after
    sglang_host): sglang_input_problems names bad values in the order of its input."""
    out = {}
    for name, value in (role_inputs or {}).items():
        if name != "sglang_python":
            out[name] = value
        if name == "sglang_host":
            out["sglang_python"] = python
    out.setdefault("sglang_python", python)
    return out


def sglang_server_refusals(inputs):
    """Every refusal of the server role's preflight, one message each ([] when there is none): the interpreter the
    sandbox would hide, drop-ins that override ExecStart or Environment, bad role inputs (sglang_input_problems),
    flags SGLang would refuse (sglang_args_problems, by the host's release), a model path not on the host, a model
    the installed SGLang would not load, SGLang's JIT toolchain missing, a missing interpreter, and the installed
    SGLang's own parser rejecting the command line. ``inputs``: {host (the preflight's host read), hostname,
    inputs (the role's variables), args, env, user_args (sglang_args), sandbox, allow_dropins, parser (the
    registered result of the parser's check, or {})}."""
    inputs = inputs if isinstance(inputs, dict) else {}
    host, args = inputs.get("host"), inputs.get("args")
    hostname, env, user_args = inputs.get("hostname", ""), inputs.get("env"), inputs.get("user_args")
    sandbox, allow_dropins = inputs.get("sandbox", True), inputs.get("allow_dropins", False)
    parser = inputs.get("parser")
    python = (host or {}).get("python", "") if isinstance(host, dict) else ""
    role_inputs = inputs.get("inputs")
    host = host if isinstance(host, dict) else {}
    args = args if isinstance(args, dict) else {}
    python = str(python or "")
    refusals = []
    if _bool(sandbox) and python.startswith(("/root/", "/home/", "/run/user/")):
        refusals.append("sglang_python %s is under /root, /home or /run/user, which the unit's sandbox hides "
                        "(ProtectHome=yes); nothing was changed. Move the venv (e.g. under /opt) or set "
                        "sglang_unit_sandbox: false (and sglang_user: \"\" when only root can read it)" % python)
    dropins = host.get("dropin_overrides") or []
    if dropins and not _bool(allow_dropins):
        refusals.append("drop-ins override the managed unit (nothing was changed): %s. Remove them, or set "
                        "sglang_allow_dropin_overrides: true to keep them" % "; ".join(dropins))
    problems = sglang_input_problems(_with_python(role_inputs, python))
    if problems:
        refusals.append("server role inputs refused (nothing was changed): " + "; ".join(problems))
    problems = sglang_args_problems(args, env or {}, user_args=user_args or {}, release=host.get("sglang_release", ""))
    if problems:
        refusals.append("sglang_args / sglang_env refused (nothing was changed): " + "; ".join(problems))
    present = set(path for path, state in (host.get("paths") or {}).items()
                  if isinstance(state, dict) and state.get("exists"))
    wanted = [("model (--model-path)", str(args.get("model-path", "") or ""))]
    if args.get("speculative-draft-model-path"):
        wanted.append(("draft model (--speculative-draft-model-path)", str(args["speculative-draft-model-path"])))
    missing = ["%s %s" % (what, path) for what, path in wanted if path not in present]
    if missing:
        refusals.append("not on %s (nothing was changed): %s" % (hostname, ", ".join(missing)))
    model_problems = (host.get("models") or {}).get("problems") or []
    if model_problems:
        refusals.append("model preflight on %s (nothing was changed; sglang_model_check: false skips it): %s"
                        % (hostname, "; ".join(model_problems)))
    refusals.extend(host.get("jit_problems") or [])
    if not host.get("python_exists", True):
        refusals.append("sglang_python %s does not exist on %s (run gpuserve.sglang.install first; nothing was "
                        "changed)" % (python, hostname))
    parser = parser if isinstance(parser, dict) else {}
    if parser and not parser.get("skipped") and parser.get("rc", 0) != 0:
        errors = [line for line in parser.get("stderr_lines") or [] if "error:" in line]
        why = errors[-1] if errors else str(parser.get("stderr") or parser.get("msg") or "").strip()
        refusals.append("the installed SGLang's parser rejects the command line (nothing was changed): " + why)
    return refusals


def sglang_server_notes(host, allow_dropins=False, features=None):
    """What the preflight allowed or did not check, to say (not refusals): drop-ins that override the managed unit
    when sglang_allow_dropin_overrides allows them, what the model preflight did not check, and with ``features``
    ({features: sglang_server_features, args, plan: sglang_memory_plan}) whether the checkpoint prefetch is used
    and why."""
    host = host if isinstance(host, dict) else {}
    notes = []
    if isinstance(features, dict):
        notes.extend(sglang_server_feature_args(features.get("features"), features.get("args") or {},
                                                host.get("sglang_release", ""), features.get("plan"))[1])
    dropins = host.get("dropin_overrides") or []
    if dropins and _bool(allow_dropins):
        notes.append("drop-ins override the managed unit (allowed): " + "; ".join(dropins))
    unchecked = (host.get("models") or {}).get("notes") or []
    if unchecked:
        notes.append("model preflight, not checked: " + "; ".join(unchecked))
    return notes


def sglang_server_gpu_groups(groups, device_files=()):
    """The names of the groups that own the GPU device files (``groups``: ansible_facts.getent_group;
    ``device_files``: ansible.builtin.find's files of /dev/nvidia*, with gid; root's group left out): the service
    account joins them."""
    groups = groups if isinstance(groups, dict) else {}
    gids = set(str(f.get("gid")) for f in device_files or [] if isinstance(f, dict) and f.get("gid") not in (0, "0"))
    return sorted(name for name, entry in groups.items() if isinstance(entry, list) and len(entry) > 1
                  and str(entry[1]) in gids)


def sglang_server_gate_seconds(gates):
    """The longest the gates after a restart take, for the host lease's TTL (plugin_utils/_server_lease.py: the
    action plugin of gpuserve.sglang.sglang_lease computes it from its ``gates`` option). Deprecated."""
    return _server_lease.gate_seconds(gates)


ENV_HEADER = "# Managed by gpuserve.sglang.server (Ansible): local changes are overwritten.\n"


def sglang_server_envfile(env):
    """The environment file's text: the header, then the variables (sglang_envfile). The API key is not among them:
    SGLang reads it from the secrets file (--config), the one file a rollback leaves as it is, so that a key rotated
    by a change that then fails does not come back with the environment file (issue 39, point 10)."""
    return ENV_HEADER + sglang_envfile(dict(env or {}))


def sglang_server_secrets(keys):
    """The secrets file's text for SGLang's --config ({'api-key': ..., 'admin-api-key': ...}, the empty ones left
    out), or '' when no key is set (the file must then be absent)."""
    keys = dict((name, value) for name, value in (keys or {}).items() if value not in ("", None))
    return to_nice_yaml(keys) if keys else ""


def sglang_server_reads(host, nccl_env_file):
    """The files outside the unit that the server reads at its start (a change to one makes the running invocation
    stale, and a rollback puts it back): nccl.env, the interpreter's sitecustomize.py and .pth hook (NCCL tuning;
    ``host`` is the preflight's host read: purelib). The install record is sglang_server_install_record's."""
    host = host if isinstance(host, dict) else {}
    reads = [nccl_env_file]
    site = str(host.get("purelib") or "")
    if site.startswith("/"):
        reads += [site + "/sitecustomize.py", site + "/gpuserve_nccl_tuning.pth"]
    return reads


def sglang_server_install_record(host, install_record):
    """The install record of the venv the unit runs: a versioned venv's own copy, else the host's
    ``install_record`` (``host``: the preflight's host read: python, versioned_venv). A change to it (a new SGLang
    release or patch set in the same venv) makes the running invocation stale; it is never restored."""
    host = host if isinstance(host, dict) else {}
    python = str(host.get("python") or "")
    if host.get("versioned_venv"):
        return posixpath.dirname(posixpath.dirname(python)) + "/gpuserve-install-record.json"
    return install_record


def sglang_server_identity(host, args):
    """What the answers gate's baseline belongs to: the model path, the host's SGLang release and the model's
    config.json sha256 (the model preflight's read)."""
    host = host if isinstance(host, dict) else {}
    models = (host.get("models") or {}).get("models") or []
    model = next((m for m in models if isinstance(m, dict) and m.get("role") == "model"), {})
    return {"model": str((args or {}).get("model-path", "")), "release": str(host.get("sglang_release") or ""),
            "config_sha256": str(model.get("config_sha256") or "")}


def sglang_server_account_ok(account, groups=()):
    """Whether the service account is complete as the preflight's host read found it (``account``: exists,
    group_exists, groups, device_groups): it exists, with its group, in every group that owns a GPU device file
    and in every one of ``groups`` (sglang_user_groups). Then the install step is skipped as a whole."""
    account = account if isinstance(account, dict) else {}
    wanted = list(account.get("device_groups") or []) + list(groups or [])
    return bool(account.get("exists") and account.get("group_exists")
                and not set(wanted) - set(account.get("groups") or []))


def sglang_group(nodes, hostvars, play_hosts, phase, result="sglang_server", lease="sglang_lease"):
    """The group's verdict on ``phase`` of a server over several hosts (module_utils/_server/group.py: the one
    function): problems, whether a restart is due on any node, the nodes with an earlier run's open change, the
    decision the rescue carries out on every node, and ``group``: this run's group change, the run's id that the
    host lease registered on node 0 (the same on every host of one ansible-playbook run)."""
    results, group = {}, ""
    for index, node in enumerate(nodes if isinstance(nodes, (list, tuple)) else []):
        facts = hostvars[node] if node in hostvars else {}
        results[node] = facts.get(result)
        taken = facts.get(lease)
        if index == 0 and isinstance(taken, dict) and isinstance(taken.get("lease"), dict):
            group = str(taken["lease"].get("id") or "")
    return _group.verdict(nodes, results, play_hosts, phase, group)


class FilterModule(object):
    """What the server role's YAML needs computed."""

    def filters(self):
        return {
            "sglang_server_args": sglang_server_args,
            "sglang_server_argv": sglang_server_argv,
            "sglang_server_cmdline": sglang_server_cmdline,
            "sglang_plan_inputs": sglang_plan_inputs,
            "sglang_server_plan": sglang_server_plan,
            "sglang_server_models": sglang_server_models,
            "sglang_server_refusals": sglang_server_refusals,
            "sglang_server_notes": sglang_server_notes,
            "sglang_server_gate_seconds": sglang_server_gate_seconds,
            "sglang_server_envfile": sglang_server_envfile,
            "sglang_server_secrets": sglang_server_secrets,
            "sglang_server_reads": sglang_server_reads,
            "sglang_server_install_record": sglang_server_install_record,
            "sglang_server_identity": sglang_server_identity,
            "sglang_server_gpu_groups": sglang_server_gpu_groups,
            "sglang_server_account_ok": sglang_server_account_ok,
            "sglang_group": sglang_group,
        }
