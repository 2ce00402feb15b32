# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NCCL variables the nccl_tuning role writes, from its inputs, and what is wrong with those inputs.

nccl_network (issue 25) is NCCL across hosts as data: the network a multi-node server's ranks talk over, described
once and turned into NCCL's own variables, written with the rest of nccl_env (sitecustomize block, nccl.env):

  transport   socket | ib | roce   socket: NCCL_IB_DISABLE=1 (NCCL's socket transport over `interface`);
                                    ib / roce: NCCL_IB_DISABLE=0 and NCCL_IB_HCA from `hcas`
  interface   the NIC(s) for NCCL's bootstrap and socket traffic: a name, a list, or NCCL's own "^docker,lo"
              (exclude) / "=eth0" (exact) forms -> NCCL_SOCKET_IFNAME; one plain name also -> GLOO_SOCKET_IFNAME
              (torch.distributed's gloo groups, which SGLang uses across nodes)
  hcas        ib/roce: the HCAs, e.g. [mlx5_0, "mlx5_1:1"] -> NCCL_IB_HCA (hca_match: prefix | exact | exclude)
  gid_index   roce: the RoCE v2 GID index (0-255) -> NCCL_IB_GID_INDEX (required for roce: NCCL's default picks
              what the HCA lists first, often RoCE v1 or a link-local GID)

input_problems() is every refusal that needs only the variables (nccl_env, the paths, nccl_network), in the order
the role has always given them. Pure functions, standard library only: the module nccl_tuning runs them on the
host before it changes anything, and the filters nccl_network_env / nccl_network_problems on the controller.
Tests: tests/unit/plugins/module_utils/test_nccl_network.py."""

from __future__ import annotations

import json
import os
import re

KEYS = ("transport", "interface", "hcas", "hca_match", "gid_index")
TRANSPORTS = ("socket", "ib", "roce")
_IFACE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}\Z")        # Linux interface names (IFNAMSIZ 16)
_HCA_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}(:[0-9]{1,3})?\Z")  # mlx5_0, mlx5_0:1
_HCA_PREFIX = {"prefix": "", "exact": "=", "exclude": "^"}


def _interfaces(value):
    """(prefix, [names]) of `interface`: a string (NCCL's own ^/= forms, commas) or a list of names."""
    if isinstance(value, str):
        prefix = value[:1] if value[:1] in ("^", "=") else ""
        names = [n.strip() for n in value[len(prefix):].split(",")]
        return prefix, names
    if isinstance(value, (list, tuple)):
        return "", [n if isinstance(n, str) else repr(n) for n in value]
    return None, None


def nccl_network_problems(network):
    """One message per bad entry of nccl_network, naming the key and the value ([] when good or empty)."""
    if network in (None, {}, ""):
        return []
    if not isinstance(network, dict):
        return ["nccl_network must be a mapping (transport, interface, hcas, hca_match, gid_index), got %r" % (network,)]
    problems = ["nccl_network: unknown key %r (known: %s)" % (k, ", ".join(KEYS)) for k in network if k not in KEYS]
    transport = network.get("transport")
    if transport not in TRANSPORTS:
        problems.append("nccl_network.transport must be one of %s, got %r" % (", ".join(TRANSPORTS), transport))
    if "interface" in network:
        prefix, names = _interfaces(network["interface"])
        if names is None or not names or not all(_IFACE_RE.match(n) for n in names):
            problems.append("nccl_network.interface must be a network interface name, a list of them, or NCCL's "
                            "'^name,...' / '=name' forms (letters, digits, _ . : -; at most 15 characters each), "
                            "got %r" % (network["interface"],))
    elif transport == "socket":
        problems.append("nccl_network.interface is required with transport socket (the NIC the nodes reach each "
                        "other on; NCCL's own choice may be a docker bridge or a management port)")
    hcas = network.get("hcas")
    if transport in ("ib", "roce"):
        if not isinstance(hcas, (list, tuple)) or not hcas or not all(isinstance(h, str) and _HCA_RE.match(h)
                                                                      for h in hcas):
            problems.append("nccl_network.hcas must list the HCAs for transport %s (e.g. [mlx5_0, 'mlx5_1:1']), "
                            "got %r" % (transport, hcas))
    elif hcas not in (None, []):
        problems.append("nccl_network.hcas is for transport ib or roce, not %r" % (transport,))
    if network.get("hca_match", "prefix") not in _HCA_PREFIX:
        problems.append("nccl_network.hca_match must be prefix, exact or exclude, got %r" % (network.get("hca_match"),))
    gid = network.get("gid_index")
    if transport == "roce":
        if isinstance(gid, bool) or not isinstance(gid, int) or not 0 <= gid <= 255:
            problems.append("nccl_network.gid_index must be the RoCE v2 GID index (0-255) for transport roce "
                            "(show_gids lists it), got %r" % (gid,))
    elif gid is not None:
        problems.append("nccl_network.gid_index is for transport roce, not %r" % (transport,))
    return problems


def nccl_network_env(network):
    """The NCCL (and gloo) variables of nccl_network, as strings; {} for an empty one. Raises on a bad one."""
    if network in (None, {}, ""):
        return {}
    problems = nccl_network_problems(network)
    if problems:
        raise ValueError("; ".join(problems))
    transport = network["transport"]
    env = {"NCCL_IB_DISABLE": "1" if transport == "socket" else "0"}
    if "interface" in network:
        prefix, names = _interfaces(network["interface"])
        env["NCCL_SOCKET_IFNAME"] = prefix + ",".join(names)
        if not prefix and len(names) == 1:
            env["GLOO_SOCKET_IFNAME"] = names[0]
    if transport in ("ib", "roce"):
        env["NCCL_IB_HCA"] = _HCA_PREFIX[network.get("hca_match", "prefix")] + ",".join(network["hcas"])
    if transport == "roce":
        env["NCCL_IB_GID_INDEX"] = str(network["gid_index"])
    return env


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,:/=+^@%-]+\Z")


def nccl_env_problems(nccl_env):
    """One message per unusable entry of nccl_env ([] when all are usable): names must be environment variable
    names, values a non-empty string or number of a safe alphabet, so that the same text is valid in
    sitecustomize.py and in a systemd EnvironmentFile. An empty or non-mapping nccl_env is one message."""
    if not isinstance(nccl_env, dict) or not nccl_env:
        return ["nccl_env must be a non-empty mapping of NCCL variables, got %r" % (nccl_env,)]
    problems = []
    for key, value in nccl_env.items():
        if (isinstance(key, str) and _ENV_NAME_RE.match(key) and isinstance(value, (str, int, float))
                and _ENV_VALUE_RE.match(str(value))):
            continue
        problems.append("nccl_env entry %s=%s is not usable. Names must be environment variable names "
                        "([A-Za-z_][A-Za-z0-9_]*); values a non-empty string or number made of letters, digits and "
                        "_ . , : / = + ^ @ %% - only (no spaces, quotes, $ or newlines, so that the same text is "
                        "valid in sitecustomize.py and in a systemd EnvironmentFile)" % (key, value))
    return problems


def nccl_network_merge(nccl_env, network):
    """What the role writes: {"env": nccl_env with nccl_network's variables over it, "replaced": {name: [the
    nccl_env value, nccl_network's]} for the names whose value nccl_network changed}."""
    if not isinstance(nccl_env, dict):
        raise ValueError("nccl_network_merge: nccl_env must be a mapping, got %r" % (nccl_env,))
    extra = nccl_network_env(network)
    replaced = {k: [str(nccl_env[k]), v] for k, v in sorted(extra.items()) if k in nccl_env and str(nccl_env[k]) != v}
    merged = dict(nccl_env)
    merged.update(extra)
    return {"env": merged, "replaced": replaced}


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def path_problems(paths):
    """One message per path that is not absolute or has a control character ([] when all are usable), in order.
    paths: (variable name, value) pairs (nccl_python, nccl_tuning_env_file)."""
    return ["%s must be an absolute path without control characters, got %s" % (name, json.dumps(value))
            for name, value in paths
            if not (isinstance(value, str) and os.path.isabs(value) and not _CONTROL_RE.search(value))]


def input_problems(nccl_env, paths, network):
    """Every refusal of the inputs, in the role's order: nccl_env's entries, the paths, nccl_network's entries."""
    return nccl_env_problems(nccl_env) + path_problems(paths) + nccl_network_problems(network)
