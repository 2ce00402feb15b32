# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Worker URLs of an inventory group, as the routers list them (the router role and the rollout share it), and
the health URL of one server, derived once from sglang_host/sglang_port (the role and every playbook)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import DEFAULT_BOOTSTRAP_PORT, pd_kind
from ansible_collections.gpuserve.sglang.plugins.plugin_utils._text_safety import unbracket, url_host
from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def server_host(host, hostvars):
    """The host that serves the API of ``host``'s server: node 0 of a server over several hosts
    (sglang_server_nodes, issue 25: SGLang serves no API on the other nodes), else the host itself."""
    hv = hostvars[host] if host in hostvars else {}
    nodes = hv.get("sglang_server_nodes") or []
    return nodes[0] if nodes and isinstance(nodes, (list, tuple)) else host


def sglang_worker_urls(hosts, hostvars, default_port=30000, scheme="http"):
    """[http://<sglang_router_worker_address | inventory_hostname>:<sglang_port | default_port>] per server: a node
    of a server over several hosts stands for its node 0 (the one worker a router lists for that server), once."""
    if hosts is None:
        return []
    urls = []
    for node in hosts:
        host = server_host(node, hostvars)
        hv = hostvars[host] if host in hostvars else {}
        address = hv.get("sglang_router_worker_address") or host
        port = hv.get("sglang_port") or default_port
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise AnsibleFilterError("%s: sglang_port %r is not a port number" % (host, port))
        if ":" in str(address) and not str(address).startswith("["):
            address = "[%s]" % address
        url = "%s://%s:%d" % (scheme, address, port)
        if url not in urls:
            urls.append(url)
    return urls


def sglang_worker_kinds(hosts, hostvars, default_port=30000, scheme="http"):
    """{worker URL (sglang_worker_urls): {"worker_type": prefill|decode|regular, "bootstrap_port": int or None}}
    per server, from its node 0's sglang_disaggregation_mode (issue 25): what a router in PD mode is told when a
    drained worker is put back, and what "never the last of either kind" counts."""
    out = {}
    for host in [server_host(node, hostvars) for node in hosts or []]:
        url = sglang_worker_urls([host], hostvars, default_port, scheme)[0]
        hv = hostvars[host] if host in hostvars else {}
        port = hv.get("sglang_disaggregation_bootstrap_port")
        try:
            mode, port = pd_kind(hv.get("sglang_disaggregation_mode") or "null",
                                 DEFAULT_BOOTSTRAP_PORT if port is None or port == "" else port)
        except AnsibleFilterError as exc:
            raise AnsibleFilterError("%s: %s" % (host, exc.message))
        out[url] = {"worker_type": "regular" if mode == "null" else mode, "bootstrap_port": port}
    return out


def sglang_pd_args(hosts, hostvars, default_port=30000, scheme="http"):
    """The gateway's PD-mode flags for these servers: {"pd-disaggregation": true, "prefill": [[URL, PORT], ...],
    "decode": [[URL], ...]} (both gateways: --prefill URL BOOTSTRAP_PORT and --decode URL, each repeated; the
    flag filter writes a list of lists as one flag per inner list). Raises, naming the hosts, when a server has no
    mode or a kind has no server: a PD gateway with no prefill (or no decode) server answers every request 503."""
    kinds = sglang_worker_kinds(hosts, hostvars, default_port, scheme)
    regular = sorted(url for url, kind in kinds.items() if kind["worker_type"] == "regular")
    if regular:
        raise AnsibleFilterError("a gateway in PD mode routes only to prefill and decode servers; these set no "
                                 "sglang_disaggregation_mode: %s" % ", ".join(regular))
    prefill = [[url, str(kind["bootstrap_port"])] for url, kind in kinds.items() if kind["worker_type"] == "prefill"]
    decode = [[url] for url, kind in kinds.items() if kind["worker_type"] == "decode"]
    if not prefill or not decode:
        workers = ", ".join(kinds) or "none"
        raise AnsibleFilterError("a gateway in PD mode needs at least one prefill and one decode server; the workers "
                                 "(%s) hold %d prefill and %d decode" % (workers, len(prefill), len(decode)))
    return {"pd-disaggregation": True, "prefill": prefill, "decode": decode}


def _url(scheme, address, port):
    address = str(address)
    if ":" in address and not address.startswith("["):
        address = "[%s]" % address
    return "%s://%s:%d" % (scheme, address, port)


def sglang_worker_aliases(hosts, hostvars, default_port=30000, scheme="http"):
    """{primary URL (sglang_worker_urls): [the other URLs a router may list the same server by]} per host: its
    inventory name, ansible_host, a non-wildcard, non-loopback sglang_host, and, where facts were gathered, its
    FQDN and default IPv4/IPv6 addresses, each on the same port. The drain and the re-add map what a router lists
    back to the host through them (one identity per worker, whichever name registered it)."""
    out = {}
    for host in [server_host(node, hostvars) for node in hosts or []]:
        primary = sglang_worker_urls([host], hostvars, default_port, scheme)[0]
        if primary in out:
            continue
        hv = hostvars[host] if host in hostvars else {}
        port = int(hv.get("sglang_port") or default_port)
        facts = hv.get("ansible_facts") or {}
        names = [host, hv.get("ansible_host"), hv.get("sglang_host"),
                 facts.get("fqdn"), (facts.get("default_ipv4") or {}).get("address"),
                 (facts.get("default_ipv6") or {}).get("address")]
        urls = []
        for name in names:
            if not name or not isinstance(name, str) or name.strip("[]") in LOOPBACK + WILDCARDS:
                continue
            if any(ord(c) < 33 for c in name) or "/" in name or "@" in name:
                continue
            url = _url(scheme, name.strip("[]"), port)
            if url != primary and url not in urls:
                urls.append(url)
        out[primary] = urls
    return out


def sglang_worker_loopback(hosts, hostvars):
    """The hosts whose server listens on loopback only (sglang_host 127.0.0.1 / localhost / ::1 or unset:
    the server role's default): a router on another host cannot reach them."""
    bad = []
    for host in hosts or []:
        hv = hostvars[host] if host in hostvars else {}
        if server_host(host, hostvars) != host:
            continue        # no API on nodes 1..N-1 of a server over several hosts: not a worker
        if str(hv.get("sglang_host", "127.0.0.1")) in LOOPBACK:
            bad.append(host)
    return bad


def sglang_router_urls(hosts, hostvars, default_port=30000):
    """[http://<sglang_router_api_address | inventory_hostname>:<sglang_router_port | default_port>] per router."""
    urls = []
    for host in hosts or []:
        hv = hostvars[host] if host in hostvars else {}
        address = hv.get("sglang_router_api_address") or host
        port = hv.get("sglang_router_port") or default_port
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise AnsibleFilterError("%s: sglang_router_port %r is not a port number" % (host, port))
        if ":" in str(address) and not str(address).startswith("["):
            address = "[%s]" % address
        urls.append("http://%s:%d" % (address, port))
    return urls


WILDCARDS = ("0.0.0.0", "::", "")


def sglang_health_url(host, port=30000, path="/health"):
    """http://<host>:<port><path> for the server listening on ``host``: a wildcard address (0.0.0.0, ::, empty)
    is asked on 127.0.0.1, an IPv6 address is bracketed. Never raises: the role's argument_specs template its
    default before the preflight runs, and the preflight's own refusal of a bad sglang_host or sglang_port (named,
    nothing changed) must be the one the operator reads; sglang_service refuses a URL that is still not one."""
    host = unbracket(host)
    if host in WILDCARDS:
        host = "127.0.0.1"
    return "http://%s:%s%s" % (url_host(host), str(port).strip(), path)


# sglang_router_extra_args lands in the unit's ExecStart (a 0644 file) and in the gateway's /proc/<pid>/cmdline,
# which every local user reads; neither pinned gateway reads these flags from its environment or a file. The role
# hands over only the workers' key (sglang_router_api_key) inside the process (files/sglang_router_launch.py).
# Which flag carries a secret is the one rule's flag rule (module_utils/_secrets.py: is_secret_flag).


def sglang_router_secret_flags(extra_args):
    """The flags of extra_args (a dict of flag names) that carry a secret, by the one rule's flag rule
    (_secrets.is_secret_flag): by their name (SMG 1.13's control-plane-api-keys, tenant-api-key, oracle-password,
    any name with a secret word; a file's path and the pinned releases' counts excepted) or by their value (a URL
    with a password or token in its userinfo: --postgres-db-url postgres://user:PASSWORD@db/r, --redis-url)."""
    return sorted(str(flag) for flag, value in (extra_args or {}).items() if _secrets.is_secret_flag(flag, value))


def sglang_router_extra_args_problems(extra_args, managed=(), known=None, release=""):
    """The refusals of sglang_router_extra_args, each a sentence (empty: accepted): a flag the role manages, a
    flag the release does not know (known: its flags, None when unknown), a flag that carries a secret."""
    if extra_args is None:
        extra_args = {}
    if not isinstance(extra_args, dict):
        return ["sglang_router_extra_args must be a mapping of flag names to values, got %s" % type(extra_args).__name__]
    problems = []
    managed_set = sorted(set(extra_args) & set(managed or ()))
    if managed_set:
        problems.append("sglang_router_extra_args may not set flags the role manages: %s" % ", ".join(managed_set))
    if known is not None:
        unknown = sorted(set(extra_args) - set(known))
        if unknown:
            problems.append("flags %s does not know (sglang_router_extra_args): %s" % (release, ", ".join(unknown)))
    secret = sglang_router_secret_flags(extra_args)
    if secret:
        problems.append(
            "sglang_router_extra_args may not carry secrets: %s would land in the unit's ExecStart (a 0644 file) and "
            "in the gateway's command line (/proc/<pid>/cmdline, ps), readable by every local user, and %s reads "
            "them from nowhere else (neither its environment nor a file). The role hands only the workers' key over "
            "inside the process (sglang_router_api_key, through its 0600 environment file); a gateway feature that "
            "needs another secret (control-plane keys, tenant keys, a database password) is not supported by the "
            "role" % (", ".join(secret), release or "the gateway"))
    return problems


class FilterModule(object):
    """Fleet helpers for the router role and the router-aware rollout."""

    def filters(self):
        return {
            "sglang_worker_urls": sglang_worker_urls,
            "sglang_worker_kinds": sglang_worker_kinds,
            "sglang_pd_args": sglang_pd_args,
            "sglang_worker_aliases": sglang_worker_aliases,
            "sglang_worker_loopback": sglang_worker_loopback,
            "sglang_router_urls": sglang_router_urls,
            "sglang_health_url": sglang_health_url,
            "sglang_router_extra_args_problems": sglang_router_extra_args_problems,
        }
