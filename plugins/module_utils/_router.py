# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Take SGLang workers out of every sglang-router (0.3.2), drain them, and put them back.

The router's worker API (seen working without ``--enable-igw``):

* ``GET /workers`` -> ``{"workers": [{"id", "url", "is_healthy", "load", ...}], "total": N}``; ``load`` is the
  worker's in-flight request count as the router sees it.
* ``DELETE /workers/<id>`` -> 202; the worker leaves the list within a second or two.
* ``POST /workers`` ``{"url": ...}`` -> 202; listed and healthy within seconds when the worker answers /health
  (a worker that does not answer yet is retried by the router every ``--worker-startup-check-interval``, 30 s by
  default: so a worker is put back only once its own /health says 200).

Drain: take the batch out of EVERY router first (no new request reaches it), then wait until the worker's own
``/metrics`` says it holds nothing (SGLang's ``sglang:num_running_reqs`` + ``sglang:num_queue_reqs`` and, on a
prefill or decode server, its disaggregation queues: IN_FLIGHT_METRICS), bounded by the drain timeout; what was
still in flight then is reported as cut. Safety (refused before anything changes): never more
than ``max_unavailable`` fleet workers out of a router (the batch counted in), never the last healthy worker of a
router.

One identity per worker: the routers list a worker by the URL it was registered with (the inventory's
``http://<host>:<port>``, or an address of ``sglang_router_worker_urls``). Each worker is named by its primary URL
(the inventory's) and may have aliases (its other addresses, same port); whatever a router lists is mapped back to
the primary through them, the drain removes and the re-add puts back the URL that router listed. A batch worker
that no router lists while the routers list URLs no fleet worker is known by is refused, naming what they list.

Reconcile: a fleet worker whose own ``/health`` answers 200 but that a router does not list (left out by an earlier
failed re-add) is put back before a drain, and by the router role's verify, and said so: "already out" is never a
reason to keep capacity out. Except a worker left out ON PURPOSE (issue 41): a rollout whose rolled-back worker did
not verify records it as held out (state ``held_out``, in ``held_out_file`` on each router host: JSON
``{"version": 1, "held_out": {url: {"reason", "when"}}}``); the reconcile never puts it back (its /health may well
say 200 on a configuration that did not verify), it counts as out for ``max_unavailable``, and the verify does not
wait for it. It stays out until a run verifies it: the re-add after a verified restart (``present``) and
``released`` clear the record.

A re-add carries the key the workers need (``worker_api_key``: the router passes it on to that worker); an answer
"already exists" (SMG keeps a removed worker about 5 s in ``draining``) is not success: the re-add waits until the
old entry is gone and posts again.

Everything here takes its HTTP, clock and sleep as arguments, so the logic is tested without a network.
"""

from __future__ import annotations

import json
import os
import re
import time

try:
    from http.client import HTTPException
    from urllib.error import HTTPError, URLError
    from urllib.request import ProxyHandler, Request, build_opener
except ImportError:  # pragma: no cover - Python 2
    raise

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

# The scheduler's gauges of requests it still holds (sglang/srt/observability/metrics_collector.py, 0.5.23;
# metrics/collector.py, 0.5.9): running and waiting, and the disaggregation queues of a prefill or decode server
# (issue 41): a prefill holds a request in its bootstrap queue until a decode server is ready for it and in its
# inflight queue while that decode server pulls its KV; a decode server holds it in its prealloc queue (memory and
# handshake) and its transfer queue (the KV coming) before it runs. 0.5.9 calls the prefill's first queue
# "prealloc", 0.5.23 "bootstrap". A request is in one of them at a time; the drain waits until all say zero.
IN_FLIGHT_METRICS = ("sglang:num_running_reqs", "sglang:num_queue_reqs",
                     "sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_prealloc_queue_reqs",
                     "sglang:num_prefill_inflight_queue_reqs",
                     "sglang:num_decode_prealloc_queue_reqs", "sglang:num_decode_transfer_queue_reqs")
PD_KINDS = ("prefill", "decode")
METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)")
# with priority scheduling SGLang writes each queue twice: the total under priority="" and a breakdown per priority
PRIORITY_BREAKDOWN = re.compile(r'[{,]\s*priority="[^"]+"')


HELD_OUT_VERSION = 1


class RouterError(Exception):
    """A router or worker did not do what was asked (message says which and what it answered)."""


class Refused(RouterError):
    """The request would break a safety rule; nothing was changed."""


def normalize_url(url):
    return url.rstrip("/")


def http_call(method, url, body=None, timeout=10.0, headers=None):
    """One HTTP call without proxy: (status or None, text). None means no answer (refused, timeout, reset)."""
    opener = build_opener(ProxyHandler({}))
    data = json.dumps(body).encode() if body is not None else None
    req = Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except HTTPError as exc:
        try:
            text = exc.read().decode("utf-8", "replace")
        except Exception:  # pylint: disable=broad-except
            text = ""
        return exc.code, text
    except (URLError, HTTPException, OSError, ValueError) as exc:
        return None, str(exc)


def in_flight_from_metrics(text):
    """The requests SGLang still holds, from its /metrics text: running, queued and in the disaggregation queues
    (IN_FLIGHT_METRICS), summed over label sets (ranks), a per-priority breakdown left out; None if absent."""
    total = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = METRIC_LINE.match(line)
        if match and match.group("name") in IN_FLIGHT_METRICS \
                and not PRIORITY_BREAKDOWN.search(match.group("labels") or ""):
            try:
                value = float(match.group("value"))
            except ValueError:
                continue
            total = (total or 0) + int(round(value))
    return total


def read_held_out(path):
    """{worker URL: {"reason", "when"}} of the workers held out on purpose; {} without a file (or without a path)."""
    if not path:
        return {}
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (IOError, OSError) as exc:
        raise RouterError("cannot read the held-out workers %s: %s" % (path, exc.strerror))
    except (ValueError, UnicodeDecodeError):
        raise RouterError("the held-out workers %s are not JSON: fix or remove it (every worker it named is then "
                          "put back by the next reconcile)" % path)
    if not isinstance(data, dict) or not isinstance(data.get("held_out"), dict):
        raise RouterError("the held-out workers %s are not this collection's format" % path)
    return dict((normalize_url(url), entry) for url, entry in data["held_out"].items())


def write_held_out(path, held):
    """The record, written atomically (root-only), its directory made when missing."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    write_atomic(path, (json.dumps({"version": HELD_OUT_VERSION, "held_out": held}, indent=1, sort_keys=True)
                        + "\n").encode("utf-8"), mode=0o600, root_owned=True)


class Fleet(object):
    """The routers of a fleet and what they say about their workers."""

    def __init__(self, routers, http=http_call, clock=time.monotonic, sleep=time.sleep, poll=0.5,
                 worker_health_path="/health", worker_metrics_path="/metrics", headers=None, aliases=None,
                 worker_api_key=None, listed_as=None, kinds=None, router_ready_path="/readiness"):
        self.routers = [normalize_url(r) for r in routers]
        # prefill/decode servers behind a gateway in PD mode: {primary: {"worker_type", "bootstrap_port"}} from the
        # inventory, else what a router listed (a drained worker is put back as the kind it was)
        # (a given "regular" is no knowledge: the router's listing decides then)
        self.kinds = dict((normalize_url(w), dict(k)) for w, k in (kinds or {}).items()
                          if isinstance(k, dict) and k.get("worker_type") in PD_KINDS)
        # every name a worker may be listed by -> its primary URL
        self.primary_of = {}
        for primary, names in (aliases or {}).items():
            primary = normalize_url(primary)
            self.primary_of[primary] = primary
            for name in names or []:
                self.primary_of.setdefault(normalize_url(name), primary)
        self.worker_api_key = worker_api_key
        # {router: {primary: the URL that router listed it by}}, from the drain
        self.listed_as = dict((normalize_url(r), dict((normalize_url(p), normalize_url(u)) for p, u in m.items()))
                              for r, m in (listed_as or {}).items())
        # where a worker's own /health and /metrics are asked: the URL the routers list it by
        self.reach = {}
        for router in sorted(self.listed_as):
            for primary, url in sorted(self.listed_as[router].items()):
                self.reach.setdefault(primary, url)
        self.http = http
        self.clock = clock
        self.sleep = sleep
        self.poll = poll
        self.worker_health_path = worker_health_path
        # a router serves when its readiness says so: SMG's /health stays 200 while it drains or has no worker;
        # /readiness (both pinned releases) answers 503 then
        self.router_ready_path = router_ready_path
        self.worker_metrics_path = worker_metrics_path
        self.headers = headers or {}
        self.log = []

    # --- reading -------------------------------------------------------------------------------------
    def workers(self, router):
        """{url: {"id", "is_healthy", "load"}} of one router; RouterError when it does not answer."""
        code, text = self.http("GET", router + "/workers", headers=self.headers)
        if code != 200:
            raise RouterError("router %s: GET /workers answered %s: %s" % (router, code, text[:200]))
        try:
            listed = json.loads(text).get("workers") or []
        except (ValueError, AttributeError):
            raise RouterError("router %s: GET /workers is not JSON: %s" % (router, text[:200]))
        return dict((normalize_url(w.get("url", "")), {"id": w.get("id"), "is_healthy": bool(w.get("is_healthy")),
                                                       "load": int(w.get("load") or 0),
                                                       "status": w.get("status"),
                                                       "worker_type": w.get("worker_type") or "regular",
                                                       "bootstrap_port": w.get("bootstrap_port")}) for w in listed)

    def view(self, router):
        """{primary URL: entry (with its listed "url")} of one router: every listed URL mapped to the worker it
        names; a URL no fleet worker is known by stays under its own name. A worker SMG is still removing
        (status draining) is leaving, not listed."""
        out = {}
        for url, entry in self.workers(router).items():
            if entry.get("status") == "draining":
                continue
            primary = self.primary_of.get(url, url)
            out[primary] = dict(entry, url=url)
            self.reach.setdefault(primary, url)
            if entry.get("worker_type") in PD_KINDS and primary not in self.kinds:
                self.kinds[primary] = {"worker_type": entry["worker_type"], "bootstrap_port": entry.get("bootstrap_port")}
        return out

    def listed_at_all(self, router):
        """The primaries of every worker a router lists, one it is still removing (status draining) included."""
        return set(self.primary_of.get(url, url) for url in self.workers(router))

    def kind_of(self, worker):
        return (self.kinds.get(worker) or {}).get("worker_type") or "regular"

    def foreign(self, views, known):
        """URLs listed by a router that name no worker in known (primaries), by router."""
        out = {}
        for router, view in sorted(views.items()):
            urls = sorted(entry["url"] for primary, entry in view.items() if primary not in known)
            if urls:
                out[router] = urls
        return out

    def router_healthy(self, router):
        return self.http("GET", router + self.router_ready_path, headers=self.headers)[0] == 200

    def snapshot(self):
        return dict((router, self.workers(router)) for router in self.routers)

    def views(self):
        return dict((router, self.view(router)) for router in self.routers)

    def worker_in_flight(self, worker):
        code, text = self.http("GET", self.reach.get(worker, worker) + self.worker_metrics_path)
        if code != 200:
            return None
        return in_flight_from_metrics(text)

    def worker_healthy(self, worker):
        return self.http("GET", self.reach.get(worker, worker) + self.worker_health_path)[0] == 200

    def post(self, router, worker):
        """POST one worker to one router by the URL that router knew it by; True when accepted, False when the
        router still holds a leaving entry ("already exists": post again later)."""
        url = self.listed_as.get(router, {}).get(worker) or self.reach.get(worker, worker)
        body = {"url": url}
        kind = self.kinds.get(worker) or {}
        if kind.get("worker_type") in PD_KINDS:
            # a gateway in PD mode adds a worker without a type as a regular one, which it never routes to
            body["worker_type"] = kind["worker_type"]
            if kind["worker_type"] == "prefill" and kind.get("bootstrap_port") is not None:
                body["bootstrap_port"] = int(kind["bootstrap_port"])
        if self.worker_api_key:
            body["api_key"] = self.worker_api_key
        code, text = self.http("POST", router + "/workers", body, headers=self.headers)
        if code in (200, 201, 202):
            self.log.append("added %s to %s" % (url, router))
            return True
        if code == 409 or "already exists" in text:
            return False
        raise RouterError("router %s: POST /workers %s answered %s: %s" % (router, url, code, text[:200]))

    def put_back(self, workers, held_out=()):
        """Reconcile: every worker of workers that answers its own /health 200 but is not listed by a router is
        added to it, but never one held out on purpose (held_out). Returns {worker: [routers]} of what was put
        back."""
        put = {}
        healthy = {}
        for router in self.routers:
            view = self.view(router)
            for worker in workers:
                if worker in view or worker in held_out:
                    continue
                if worker not in healthy:
                    healthy[worker] = self.worker_healthy(worker)
                if healthy[worker] and self.post(router, worker):
                    put.setdefault(worker, []).append(router)
        return put

    # --- safety --------------------------------------------------------------------------------------
    def check_safe(self, snapshot, batch, fleet, max_unavailable):
        """Refused unless, on every router, (fleet workers not healthy-and-listed) + batch <= max_unavailable
        and at least one healthy worker stays listed outside the batch; behind a gateway in PD mode, at least one
        healthy worker of each kind the batch holds (a gateway with no prefill or no decode server answers 503)."""
        batch = set(batch)
        for router, listed in sorted(snapshot.items()):
            healthy = set(url for url, w in listed.items() if w["is_healthy"])
            out = set(fleet) - healthy
            would_be_out = out | batch
            if len(would_be_out) > max_unavailable:
                raise Refused(
                    "router %s: taking out %s would leave %d worker(s) out of service (%s), more than "
                    "max_unavailable=%d; already out: %s"
                    % (router, ", ".join(sorted(batch)), len(would_be_out), ", ".join(sorted(would_be_out)),
                       max_unavailable, ", ".join(sorted(out - batch)) or "none"))
            if not healthy - batch:
                raise Refused("router %s: %s would take out its last healthy worker (healthy now: %s)"
                              % (router, ", ".join(sorted(batch)), ", ".join(sorted(healthy)) or "none"))
            for kind in sorted(set(self.kind_of(w) for w in batch) & set(PD_KINDS)):
                of_kind = set(w for w in healthy if self.kind_of(w) == kind)
                if not of_kind - batch:
                    raise Refused("router %s: %s would take out its last healthy %s worker (healthy %s workers now: "
                                  "%s); a gateway in PD mode needs one of each kind"
                                  % (router, ", ".join(sorted(batch)), kind, kind, ", ".join(sorted(of_kind)) or "none"))

    # --- actions -------------------------------------------------------------------------------------
    def remove(self, batch, timeout):
        """DELETE each batch worker from each router that lists it; wait until no router lists any."""
        changed = False
        for router in self.routers:
            listed = self.view(router)
            for worker in batch:
                if worker in listed:
                    code, text = self.http("DELETE", router + "/workers/" + str(listed[worker]["id"]),
                                           headers=self.headers)
                    if code not in (200, 202, 204):
                        raise RouterError("router %s: DELETE %s answered %s: %s" % (router, worker, code, text[:200]))
                    self.log.append("removed %s from %s" % (listed[worker]["url"], router))
                    changed = True
        # until no router lists it at all: SMG keeps a removed worker listed as "draining" for a few seconds, and
        # the restart that follows must not begin while a router still names it
        deadline = self.clock() + timeout
        while True:
            left = [(r, w) for r in self.routers for w in batch if w in self.listed_at_all(r)]
            if not left:
                return changed
            if self.clock() >= deadline:
                raise RouterError("still listed after %ss: %s" % (timeout, ", ".join("%s on %s" % (w, r)
                                                                                     for r, w in left)))
            self.sleep(self.poll)

    def wait_drained(self, batch, drain_timeout):
        """Wait until each worker's own metrics say nothing is running or queued, at most drain_timeout s.
        Returns ({worker: requests still in flight at the end (None: no metrics)}, seconds waited)."""
        start = self.clock()
        deadline = start + drain_timeout
        last = {}
        while True:
            for worker in batch:
                last[worker] = self.worker_in_flight(worker)
            busy = [w for w in batch if last[w]]
            unknown = [w for w in batch if last[w] is None]
            if not busy and (not unknown or self.clock() >= deadline):
                return last, round(self.clock() - start, 3)
            if self.clock() >= deadline:
                return last, round(self.clock() - start, 3)
            self.sleep(self.poll)

    def add(self, batch, timeout):
        """Put each worker back on each router once its own /health says 200; wait until every router lists
        it healthy."""
        deadline = self.clock() + timeout
        pending = list(batch)
        while pending:
            pending = [w for w in pending if not self.worker_healthy(w)]
            if not pending:
                break
            if self.clock() >= deadline:
                raise RouterError("worker(s) %s do not answer %s with 200 after %ss: not put back"
                                  % (", ".join(pending), self.worker_health_path, timeout))
            self.sleep(self.poll)
        changed = False
        while True:
            waiting = []
            for router in self.routers:
                listed = self.view(router)
                for worker in batch:
                    if worker in listed:
                        continue
                    if self.post(router, worker):
                        changed = True
                    else:
                        waiting.append("%s on %s" % (worker, router))
            if not waiting:
                break
            if self.clock() >= deadline:
                raise RouterError("router still holds the old entry of %s ('already exists') after %ss: not put back"
                                  % (", ".join(waiting), timeout))
            self.sleep(self.poll)
        self.wait_listed_healthy(batch, deadline)
        return changed

    def wait_listed_healthy(self, batch, deadline):
        """Every router answers /health 200 and lists every worker of batch as healthy, by the deadline."""
        while True:
            missing = []
            for router in self.routers:
                if not self.router_healthy(router):
                    missing.append("%s: %s not 200" % (router, self.router_ready_path))
                    continue
                listed = self.view(router)
                for worker in batch:
                    if worker not in listed:
                        missing.append("%s not listed on %s" % (worker, router))
                    elif not listed[worker]["is_healthy"]:
                        missing.append("%s not healthy on %s" % (worker, router))
            if not missing:
                return
            if self.clock() >= deadline:
                raise RouterError("not every router serves every worker: " + "; ".join(missing))
            self.sleep(self.poll)


def run(params, http=http_call, clock=time.monotonic, sleep=time.sleep, check_mode=False):
    """The module's logic: returns the result dict (``changed``, ``routers``, ``cut`` ...); raises RouterError."""
    routers = [normalize_url(r) for r in params["routers"]]
    batch = [normalize_url(w) for w in params.get("workers") or []]
    fleet = [normalize_url(w) for w in params.get("fleet") or []] or batch
    fleet = sorted(set(fleet) | set(batch))
    aliases = dict((normalize_url(k), v) for k, v in (params.get("aliases") or {}).items())
    for worker in fleet:
        aliases.setdefault(worker, [])
    headers = {}
    if params.get("api_key"):
        headers["Authorization"] = "Bearer %s" % params["api_key"]
    state = params.get("state", "verified")
    fl = Fleet(routers, http=http, clock=clock, sleep=sleep, poll=params.get("poll_interval", 0.5),
               worker_health_path=params.get("worker_health_path", "/health"),
               worker_metrics_path=params.get("worker_metrics_path", "/metrics"), headers=headers,
               aliases=aliases, worker_api_key=params.get("worker_api_key"), listed_as=params.get("listed_as"),
               kinds=params.get("kinds"), router_ready_path=params.get("router_ready_path") or "/readiness")
    result = {"changed": False, "state": state, "workers": batch, "routers": {}, "log": fl.log, "put_back": {}}
    started = clock()
    held_file = params.get("held_out_file") or ""
    held = read_held_out(held_file)
    if state in ("held_out", "released"):
        # the record only: no router is asked
        if not held_file:
            raise Refused("state %s needs held_out_file" % state)
        now = dict(held)
        for worker in batch:
            if state == "released":
                now.pop(worker, None)
            elif worker not in now:
                now[worker] = {"reason": params.get("reason") or "left out by a run",
                               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        result["changed"] = now != held
        if result["changed"] and not check_mode:
            write_held_out(held_file, now)
        result["held_out"] = sorted(now)
        result["seconds"] = round(clock() - started, 3)
        return result
    if not routers:
        raise Refused("no router given")
    if state == "drained":
        before = fl.views()
        result["listed_as"] = dict((router, dict((w, view[w]["url"]) for w in batch if w in view))
                                   for router, view in before.items())
        # each batch worker's kind behind a gateway in PD mode (given, or as listed): the re-add posts it again
        result["kinds"] = dict((w, fl.kinds[w]) for w in batch if w in fl.kinds)
        unlisted = [w for w in batch if not any(w in view for view in before.values())]
        foreign = fl.foreign(before, set(fleet))
        if unlisted and foreign:
            names = "; ".join("%s: %s" % (w, ", ".join([w] + list(aliases.get(w) or []))) for w in unlisted)
            seen = "; ".join("%s lists %s" % (r, ", ".join(u)) for r, u in sorted(foreign.items()))
            raise Refused(
                "worker(s) %s listed by no router under any of their names (%s); the routers list URLs that name "
                "no worker of the fleet: %s. Nothing was changed: name each worker as its routers do "
                "(sglang_router_worker_address on the worker's host)" % (", ".join(unlisted), names, seen))
        result["held_out"] = sorted(w for w in fleet if w in held)
        if not check_mode:
            result["put_back"] = fl.put_back([w for w in fleet if w not in batch], held)
            if result["put_back"]:
                before = fl.views()
        listed_somewhere = [w for w in batch if any(w in view for view in before.values())]
        if listed_somewhere:
            fl.check_safe(before, batch, fleet, int(params.get("max_unavailable", 1)))
        if check_mode:
            result["changed"] = bool(listed_somewhere)
        else:
            result["changed"] = fl.remove(batch, float(params.get("timeout", 120))) or bool(result["put_back"])
            cut, waited = fl.wait_drained(batch, float(params.get("drain_timeout", 300)))
            result["in_flight_at_end"] = cut
            result["drain_seconds"] = waited
            result["cut"] = dict((w, n) for w, n in cut.items() if n)
            result["metrics_unavailable"] = sorted(w for w, n in cut.items() if n is None)
    elif state == "present":
        before = fl.views()
        missing = [w for w in batch if any(w not in view for view in before.values())]
        if check_mode:
            result["changed"] = bool(missing) or any(w in held for w in batch)
        else:
            result["changed"] = fl.add(batch, float(params.get("timeout", 300)))
            # verified and back: no longer held out here
            if any(w in held for w in batch):
                write_held_out(held_file, dict((w, e) for w, e in held.items() if w not in batch))
                result["changed"] = True
        result["held_out"] = sorted(w for w in held if w not in batch)
    elif state in ("verified", "reconciled"):
        deadline = clock() + float(params.get("timeout", 120))
        # a worker held out on purpose is neither put back nor waited for (it is out until a run verifies it)
        result["held_out"] = sorted(w for w in batch if w in held)
        wait_for = [w for w in batch if w not in held]
        while state == "reconciled":
            # a router that was just (re)started does not answer yet: poll it, as the verify does, until the deadline
            try:
                if check_mode:
                    views = fl.views()
                    would = [w for w in wait_for
                             if any(w not in view for view in views.values()) and fl.worker_healthy(w)]
                    result["changed"] = bool(would)
                    result["would_put_back"] = would
                    wait_for = [w for w in wait_for if w not in would]
                else:
                    for worker, put in fl.put_back(batch, held).items():
                        result["put_back"].setdefault(worker, []).extend(put)
                    result["changed"] = bool(result["put_back"])
                break
            except RouterError:
                if clock() >= deadline:
                    raise
                sleep(fl.poll)
        fl.wait_listed_healthy(wait_for, deadline)
    elif state != "status":
        raise Refused("unknown state %r" % state)
    result["routers"] = fl.snapshot()
    result["seconds"] = round(clock() - started, 3)
    return result
