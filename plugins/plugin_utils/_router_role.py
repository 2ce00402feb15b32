# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the router role needs computed, in Python (issue 39: the role's tasks are a table of contents; issue 47:
private helpers of the role's modules' action plugins, no longer collection API).

- sglang_router_inputs: from the role's variables, everything its tasks and templates read (the release and its
  data, the paths, the workers, the flags of the unit's ExecStart) and every refusal of the preflight, one message
  each, in one list; ``role_settings``, ``host_paths`` and ``role_inputs`` are the role's preflight over it, computed
  once per run by the action plugin of gpuserve.sglang.sglang_router_service (option ``router_inputs``), which
  registers the result as ``_router_in`` (the rest of the role reads it);
- sglang_router_envfile: the environment file (the workers' key);
- sglang_router_other_gateways: the other gateways a venv holds (two never share one);
- the router-aware rollout's entry points: sglang_router_batch (the hosts to drain), sglang_router_drained_words and
  sglang_router_rescue_words (the lines the rollout prints), sglang_router_lease_held / sglang_router_lease_failures
  (the routers' leases), sglang_router_readd_kinds (the kind a worker is put back as), sglang_router_worker_health.

Pure functions of their arguments, except that sglang_router_inputs (and role_inputs) reads the role's own data files
(files/gateways) on the controller (tests/unit/plugins/filter/test_router_role_filters.py). The filters of
plugins/filter/router_role.py are these functions, deprecated (meta/runtime.yml) where the role no longer calls them.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_router import (
    sglang_health_url, sglang_pd_args, sglang_router_extra_args_problems, sglang_worker_kinds, sglang_worker_loopback,
    sglang_worker_urls)
from ansible_collections.gpuserve.sglang.plugins.filter.systemd import sglang_envfile
from ansible_collections.gpuserve.sglang.plugins.module_utils import _install

RELEASE_RE = re.compile(r"[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?")
PATH_RE = re.compile(r"/[^\x00-\x1f\x7f\s]+")
URL_RE = re.compile(r"https?://[^/\s]+")
UNIT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*")
USER_RE = re.compile(r"[a-z_][a-z0-9_-]*")
SCRIPT_RE = re.compile(r"/[^\x00-\x1f\x7f\s]+\.py")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f\s]")
SOURCE_RE = re.compile(r"^(https|file)://[^\s]+\Z")
PLAIN_SOURCE_RE = re.compile(r"(^|[\s=,])(?!https://|file://)[A-Za-z][A-Za-z0-9+.-]*://")
ENV_HEADER = "# Managed by gpuserve.sglang.router (Ansible): local changes are overwritten.\n"
# the flags of ExecStart the role sets from its variables, in this order (then the workers, then the rest)
FLAG_VARS = (("health-check-interval-secs", "health_check_interval_secs", int),
             ("health-check-timeout-secs", "health_check_timeout_secs", int),
             ("health-failure-threshold", "health_failure_threshold", int),
             ("health-success-threshold", "health_success_threshold", int),
             ("health-check-endpoint", "health_check_endpoint", str),
             ("retry-max-retries", "retry_max_retries", int),
             ("request-timeout-secs", "request_timeout_secs", int),
             ("shutdown-grace-period-secs", "shutdown_grace_period_secs", int),
             ("prometheus-host", "prometheus_host", str),
             ("prometheus-port", "prometheus_port", int),
             ("log-level", "log_level", str))


def _int(value):
    """Jinja's ``| int``: 0 for what is not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _full(pattern, value):
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def _bool(value):
    if isinstance(value, str):
        return value.strip().lower() in ("yes", "on", "1", "true", "y", "t")
    return bool(value)


def _releases(role_path):
    try:
        names = os.listdir(os.path.join(role_path, "files", "gateways"))
    except OSError:
        return []
    return sorted(name[:-len(".json")] for name in names if name.endswith(".json"))


def _workers(s, hostvars, groups):
    """The workers: the URL list, else the group's servers (their URLs, kinds, PD flags, loopback ones)."""
    if s.get("worker_urls"):
        return list(s["worker_urls"]), {}, {}, []
    hosts = list((groups or {}).get(s.get("worker_group") or "") or [])
    port = s.get("worker_port") or 30000
    pd = sglang_pd_args(hosts, hostvars, port) if _bool(s.get("pd")) else {}
    return (sglang_worker_urls(hosts, hostvars, port), pd, sglang_worker_kinds(hosts, hostvars, port),
            sglang_worker_loopback(hosts, hostvars))


def _problems(s, pins, known, version, release, urls, loopback, extra, role_path):
    """The preflight's refusals of the variables, in the role's former order."""
    gateway = s.get("gateway")
    good_version = _full(RELEASE_RE, version)
    out = []
    if gateway not in pins:
        out.append("sglang_router_gateway must be one of %s, got %s" % (", ".join(pins), json.dumps(gateway)))
    if not good_version:
        out.append("sglang_router_version must be an exact release such as 0.3.2, got %s"
                   % json.dumps(s.get("version")))
    if gateway in pins and good_version and not known:
        out.append("the role has no data or hash lock for %s %s (releases it knows: %s); add one with "
                   "scripts/gen-sglang-lock.py --package and scripts/gen-gateway-data.py"
                   % (gateway, version, ", ".join(_releases(role_path))))
    out.extend(extra)
    venv = s.get("venv") or ("/opt/%s/venv" % gateway)
    if not _full(PATH_RE, venv):
        out.append("sglang_router_venv must be an absolute path without spaces or control characters: %s"
                   % json.dumps(venv))
    if not urls:
        out.append("no worker: group %s is empty or missing and sglang_router_worker_urls is empty"
                   % s.get("worker_group"))
    bad = [url for url in urls if not _full(URL_RE, url)]
    if bad:
        out.append("not a worker base URL (http(s)://host:port): %s" % ", ".join(json.dumps(url) for url in bad))
    if _bool(s.get("pd")) and s.get("worker_urls"):
        out.append("sglang_router_pd takes its workers from the group sglang_router_worker_group (each server's "
                   "sglang_disaggregation_mode), not from sglang_router_worker_urls")
    if len(set(urls)) != len(urls):
        out.append("the same worker URL twice: %s" % ", ".join(urls))
    if loopback:
        out.append("worker(s) %s listen on loopback only (sglang_host); set sglang_host: 0.0.0.0 (or the address the "
                   "router reaches) on them" % ", ".join(loopback))
    port, prom = _int(s.get("port")), _int(s.get("prometheus_port"))
    if not 1 <= port <= 65535:
        out.append("sglang_router_port must be 1-65535, got %s" % s.get("port"))
    if not 1 <= prom <= 65535 or prom == port:
        out.append("sglang_router_prometheus_port must be 1-65535 and differ from sglang_router_port, got %s"
                   % s.get("prometheus_port"))
    if not _full(UNIT_RE, s.get("service_name")):
        out.append("sglang_router_service_name is not a unit name: %s" % s.get("service_name"))
    if not _full(USER_RE, s.get("user")):
        out.append("sglang_router_user is not a user name: %s" % s.get("user"))
    if not _full(SCRIPT_RE, s.get("launch_script")):
        out.append("sglang_router_launch_script must be an absolute path to a .py file without spaces or control "
                   "characters: %s" % json.dumps(s.get("launch_script")))
    if not str(s.get("health_check_endpoint") or "").startswith("/"):
        out.append("sglang_router_health_check_endpoint must start with /")
    if CONTROL_RE.search(str(s.get("api_key") or "")):
        out.append("sglang_router_api_key holds whitespace or a control character")
    refused = []
    index = s.get("pip_index_url") or ""
    if index and not SOURCE_RE.match(index):
        refused.append("sglang_router_pip_index_url=%s" % json.dumps(index))
    extra_args = s.get("pip_extra_args") or []
    if any(PLAIN_SOURCE_RE.search(str(arg)) for arg in extra_args):
        refused.append("sglang_router_pip_extra_args=%s" % json.dumps(extra_args))
    if refused:
        out.append("only https:// (or a local file://) pip sources are allowed; refused: %s" % "; ".join(refused))
    return out


def _host_problems(s, host, name):
    """What the preflight's look at the host found: a wheel directory that is not one, no base interpreter."""
    out = []
    for item in (host or {}).get("results") or []:
        stat = item.get("stat") or {}
        if item.get("item") == s.get("wheel_dir") and s.get("wheel_dir") and not stat.get("isdir"):
            out.append("sglang_router_wheel_dir %s is not a directory on %s" % (s.get("wheel_dir"), name))
        elif item.get("item") == s.get("venv_base_python") and not stat.get("exists"):
            out.append("sglang_router_venv_base_python %s does not exist on %s" % (s.get("venv_base_python"), name))
    return out


def sglang_router_inputs(settings, hostvars, groups, role_path, managed=None, pins=None, host=None, name=None):
    """The router role's variables (``settings``: each ``sglang_router_<key>`` under ``<key>``; the managed flags,
    the pins, the preflight's look at the host and the host's name as arguments or under ``_managed``, ``_pins``,
    ``_host``, ``_name``) -> every value its tasks and templates read, and ``problems``: every refusal of the
    preflight (empty: accepted)."""
    s = dict(settings or {})
    managed = s.get("_managed") or () if managed is None else managed
    pins = dict((s.get("_pins") or {}) if pins is None else pins)
    host = s.get("_host") if host is None else host
    name = s.get("_name") or "" if name is None else name
    gateway = s.get("gateway")
    version = s.get("version") or str(pins.get(gateway) or "")
    release = "%s-%s" % (gateway, version)
    data_path = os.path.join(role_path, "files", "gateways", release + ".json")
    lock_path = os.path.join(role_path, "files", "locks", release + ".txt")
    known = (gateway in pins and _full(RELEASE_RE, version) and os.path.isfile(data_path)
             and os.path.isfile(lock_path))
    data = {}
    if known:
        with open(data_path, encoding="utf-8") as handle:
            data = json.load(handle)
    urls, pd, kinds, loopback = _workers(s, hostvars, groups)
    extra = sglang_router_extra_args_problems(s.get("extra_args"), managed,
                                              list(data.get("flags") or {}) if known else None,
                                              "%s %s" % (gateway, version))
    host_name = s.get("host") or ""
    flags = {"host": host_name, "port": _int(s.get("port")), "policy": s.get("policy")}
    flags.update(pd if _bool(s.get("pd")) else {"worker-urls": urls})
    for flag, key, kind in FLAG_VARS:
        flags[flag] = _int(s.get(key)) if kind is int else s.get(key)
    if isinstance(s.get("extra_args"), dict):
        flags.update(s["extra_args"])
    config_dir = str(s.get("config_dir") or "/etc/sglang-router").rstrip("/")
    service = s.get("service_name") or "sglang-router"
    address = "127.0.0.1" if host_name in ("0.0.0.0", "::", "") else host_name
    return {
        "version": version, "release": release, "gateways": sorted(pins), "known": bool(known), "gateway": data,
        "data_file": data_path, "lock_file": lock_path,
        "host_lock": "%s/%s.lock.txt" % (config_dir, release),
        "venv": s.get("venv") or ("/opt/%s/venv" % gateway),
        "python": (s.get("venv") or ("/opt/%s/venv" % gateway)) + "/bin/python",
        "pip_args": " ".join(sglang_router_pip_args(s.get("pip_index_url") or "", s.get("wheel_dir") or "",
                                                    s.get("pip_extra_args") or [])),
        "unit": "/etc/systemd/system/%s.service" % service,
        "env": "%s/%s.env" % (config_dir, service),
        "backup": "%s/backup" % config_dir,
        "url": "http://%s:%s" % (address, s.get("port")),
        "workers": urls, "pd": pd, "kinds": kinds, "loopback": loopback, "flags": flags,
        "problems": _problems(s, pins, known, version, release, urls, loopback, extra, role_path)
        + _host_problems(s, host, name),
    }


# The role's variables the inputs are computed from: sglang_router_<key> for each key.
SETTINGS = ("gateway", "version", "venv", "venv_base_python", "wheel_dir", "pip_index_url", "pip_extra_args",
            "service_name", "user", "config_dir", "launch_script", "host", "port", "policy", "worker_group",
            "worker_port", "pd", "worker_urls", "health_check_interval_secs", "health_check_timeout_secs",
            "health_failure_threshold", "health_success_threshold", "health_check_endpoint", "retry_max_retries",
            "request_timeout_secs", "shutdown_grace_period_secs", "prometheus_host", "prometheus_port", "api_key",
            "log_level", "extra_args")


def role_settings(read):
    """The router role's variables (``read(name)``: as the task's templar resolves them) under their keys."""
    return dict((key, read("sglang_router_" + key)) for key in SETTINGS)


def host_paths(settings):
    """What the preflight looks at on the host: the base interpreter, and the wheel directory when one is set."""
    wheel_dir = settings.get("wheel_dir") or ""
    return [str(settings.get("venv_base_python") or "")] + ([str(wheel_dir)] if wheel_dir else [])


def role_inputs(read, hostvars, groups, host):
    """The router role's inputs, computed once (the preflight): sglang_router_inputs over the role's variables, its
    data (``_router_managed_flags``, ``_router_gateway_pins``, its ``role_path``) and the look at the host
    (``host``: {"results": [{"item": path, "stat": stat}]} for each of host_paths). The release's data without its
    parser's flags (read here for the refusals only, never by a task)."""
    out = sglang_router_inputs(role_settings(read), hostvars, groups, read("role_path"),
                               read("_router_managed_flags"), read("_router_gateway_pins"), host,
                               read("inventory_hostname"))
    out["gateway"] = dict((key, value) for key, value in out["gateway"].items() if key != "flags")
    out["pins"] = lock_pins(out["lock_file"]) if out["known"] else {}
    return out


def lock_pins(path):
    """{name: version} of every requirement of a hash lock (the role's files/locks/<release>.txt): what the venv
    must hold for the install to be a no-op without pip (install.yml asks the venv, then runs pip only for a miss)."""
    with open(path, encoding="utf-8") as handle:
        lines = _install.lock_requirements(handle.read())
    pins = {}
    for line in lines:
        name, sep, rest = line.partition("==")
        if sep:
            pins[name.strip()] = rest.split()[0].split(";")[0]
    return pins


def sglang_router_envfile(api_key):
    """The router's environment file: the header, and the workers' key when there is one."""
    return ENV_HEADER + sglang_envfile({"SGLANG_ROUTER_API_KEY": api_key} if api_key else {})


def sglang_router_pip_args(index_url="", wheel_dir="", extra=()):
    """pip's arguments for the hash lock: hashes required, wheels only, the index or the host's wheel directory."""
    args = ["--require-hashes", "--only-binary=:all:"]
    if index_url:
        args += ["--index-url", index_url]
    if wheel_dir:
        args += ["--no-index", "--find-links", wheel_dir]
    return args + list(extra or [])


def sglang_router_other_gateways(found, gateway):
    """From the venv's read ({package: version or null}, or its JSON text): the other gateways installed."""
    if isinstance(found, str):
        found = json.loads(found or "{}")
    return sorted(name for name, version in (found or {}).items() if name != gateway and version is not None)


def sglang_router_batch(play_batch, hostvars):
    """The hosts of the rollout's batch to drain: those whose ``rollout_restart_due`` is not false
    (playbooks/restart.yml: nothing to restart there)."""
    out = []
    for host in play_batch or []:
        hv = hostvars[host] if host in hostvars else {}
        if hv.get("rollout_restart_due", True):
            out.append(host)
    return out


def sglang_router_readd_kinds(drained, host, hostvars):
    """The kind of one worker to put back behind a gateway in PD mode: the inventory's, then as the drain saw it."""
    kinds = sglang_worker_kinds([host], hostvars)
    kinds.update((drained or {}).get("kinds") or {})
    return kinds


def sglang_router_worker_health(host, hostvars):
    """One server's health URL as the rollout's rescue verifies it: sglang_health_url, else from sglang_host and
    sglang_port (the server role's defaults)."""
    hv = hostvars[host] if host in hostvars else {}
    if hv.get("sglang_health_url"):
        return hv["sglang_health_url"]
    return sglang_health_url(hv.get("sglang_host") or "127.0.0.1", hv.get("sglang_port") or 30000)


def sglang_router_drained_words(drained, rollout):
    """The line the drain prints (the rollout's output, read by the molecule scenarios): DRAINED <batch>: ..."""
    d = drained or {}
    batch, routers = (rollout or {}).get("batch") or [], (rollout or {}).get("routers") or []
    words = "DRAINED %s: out of %d router(s), in flight at the end %s after %s s;" % (
        ", ".join(batch or []), len(routers or []), json.dumps(d.get("in_flight_at_end") or {}),
        d.get("drain_seconds") or 0)
    if d.get("put_back"):
        words += " put back first (left out before): %s;" % json.dumps(d["put_back"])
    if d.get("held_out"):
        words += " held out on purpose until verified: %s;" % ", ".join(d["held_out"])
    words += (" CUT %s" % json.dumps(d["cut"])) if d.get("cut") else " nothing cut"
    if d.get("metrics_unavailable"):
        words += "; no metrics from %s (waited the whole drain timeout)" % ", ".join(d["metrics_unavailable"])
    return words


def sglang_router_lease_held(first):
    """From the first round of the routers' leases (a registered loop): those another live run holds."""
    return [r for r in (first or {}).get("results") or [] if r.get("contended") and not r.get("taken")]


def sglang_router_lease_failures(first, second):
    """The answers that stop the rollout: a module error (no ``taken`` in the answer), or a lease still another
    live run's after the wait (contended, not taken). Skipped items are not answers."""
    answers = [r for r in ((first or {}).get("results") or []) + ((second or {}).get("results") or [])
               if "skipped" not in r]
    waited = [r for r in (second or {}).get("results") or [] if "skipped" not in r]
    return ([r for r in answers if "taken" not in r]
            + [r for r in waited if "taken" in r and r.get("contended") and not r.get("taken")])


def sglang_router_rescue(server, held_out_file):
    """What becomes of a failed worker of the rollout (rollout_rescue.yml), read from gpuserve.sglang.sglang_server's
    own result (never a second health check, issue 47): back in every router only when the module says the unit
    serves a verified set (``serving_verified``: rolled back and the restored set verified, or never restarted and
    still the verified invocation); else held out. Returns {readmit, words}."""
    s = server if isinstance(server, dict) else {}
    restored = (s.get("rollback") or {}).get("result") or {}
    if s.get("serving_verified") is True:
        how = ("it was rolled back and its last good configuration verified (invocation %s)"
               % (restored.get("invocation_id") or "?") if s.get("rolled_back") else
               "it was never restarted: the running invocation is still the verified one")
        return {"readmit": True, "words": "The server module says %s: it is back in every router." % how}
    why = ("the rollback did not verify" if (s.get("rollback") or {}).get("ok") is False else
           "it was not rolled back (%s)" % ("a gate failed on a server this run did not restart"
                                            if s.get("answers", {}).get("failed") or s.get("bench_gate") else
                                            "no result of the server module" if not s else
                                            "no rollback applied"))
    return {"readmit": False,
            "words": "It does NOT serve a verified configuration (%s): it stays out of the routers, held out in %s on "
                     "every router host until a run verifies it. %s" % (why, held_out_file, s.get("msg") or "")}
