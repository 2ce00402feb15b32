# SPDX-License-Identifier: GPL-3.0-or-later
"""The drain/undrain logic of sglang_router_workers against a fake fleet that answers as sglang-router 0.3.2
(GET/DELETE/POST /workers, as captured from the real router) and SGLang workers (/health, /metrics)."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _router
from ansible_collections.gpuserve.sglang.plugins.module_utils._router import Refused, RouterError, run

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"} %s
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"} %s
# HELP sglang:num_requests Number of requests processed.
# TYPE sglang:num_requests counter
sglang:num_requests_total{model_name="kimi"} 42.0
"""

# a prefill server of SGLang 0.5.23 (engine_type prefill) whose requests all left the running batch and wait in
# its inflight queue while a decode server pulls their KV; with priority scheduling each queue is written twice (the
# total under priority="", a breakdown per priority)
PD_METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="prefill",model_name="kimi",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 0.0
sglang:num_queue_reqs{engine_type="prefill",model_name="kimi",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 0.0
# HELP sglang:num_prefill_bootstrap_queue_reqs The number of requests in the prefill bootstrap queue.
# TYPE sglang:num_prefill_bootstrap_queue_reqs gauge
sglang:num_prefill_bootstrap_queue_reqs{engine_type="prefill",model_name="kimi",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 0.0
# HELP sglang:num_prefill_inflight_queue_reqs The number of requests in the prefill inflight queue.
# TYPE sglang:num_prefill_inflight_queue_reqs gauge
sglang:num_prefill_inflight_queue_reqs{engine_type="prefill",model_name="kimi",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} %s
sglang:num_prefill_inflight_queue_reqs{engine_type="prefill",model_name="kimi",moe_ep_rank="0",pp_rank="0",priority="0",tp_rank="0"} 2.0
sglang:num_decode_prealloc_queue_reqs{engine_type="prefill",model_name="kimi",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 0.0
sglang:num_decode_transfer_queue_reqs{engine_type="prefill",model_name="kimi",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 0.0
"""

W = ["http://w%d:30000" % i for i in range(1, 5)]
R = ["http://gw-1:30000", "http://gw-2:30000"]


class FakeFleet(object):
    """Routers listing workers; workers with in-flight counts that fall by one per poll (sleep)."""

    def __init__(self, routers=None, workers=None, in_flight=None, healthy=None, metrics=True):
        routers = R if routers is None else routers
        workers = W if workers is None else workers
        self.lists = dict((r, dict((w, {"id": "id-" + w[7:9], "is_healthy": True, "load": 0}) for w in workers))
                          for r in routers)
        self.in_flight = dict((w, 0) for w in workers)
        self.in_flight.update(in_flight or {})
        self.up = dict((w, True) for w in workers)
        self.up.update(healthy or {})
        self.metrics = metrics
        self.now = 0.0
        self.calls = []
        self.bodies = []
        self.router_down_calls = 0  # the router refuses this many calls first (just restarted)
        self.smg = False          # SMG 1.13: a removed worker stays listed as draining for a few polls, POST 409s
        self.draining = {}        # (router, url) -> polls left
        self.pd_inflight = {}     # prefill url -> requests in its inflight queue (a decode server pulls their KV)
        self.not_ready = set()    # routers whose /readiness answers 503 (stopping, draining)

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        for key in list(self.draining):
            self.draining[key] -= 1
            if self.draining[key] <= 0:
                del self.draining[key]
                self.lists[key[0]].pop(key[1], None)
        for w in self.in_flight:
            self.in_flight[w] = max(0, self.in_flight[w] - 1)
        for w in self.pd_inflight:
            self.pd_inflight[w] = max(0, self.pd_inflight[w] - 1)

    def http(self, method, url, body=None, timeout=10.0, headers=None):
        self.calls.append((method, url))
        base, dummy, path = url[7:].partition("/")
        base = "http://" + base
        path = "/" + path
        if base in self.lists and self.router_down_calls > 0:
            self.router_down_calls -= 1
            return None, "<urlopen error [Errno 111] Connection refused>"
        if base in self.lists:
            workers = self.lists[base]
            if method == "GET" and path == "/health":
                return 200, "OK"          # SMG: 200 while it drains, stops or has no worker
            if method == "GET" and path == "/readiness":
                return (503, "insufficient healthy workers") if base in self.not_ready else (200, "OK")
            if method == "GET" and path == "/workers":
                return 200, json.dumps({"workers": [dict(v, url=k) for k, v in workers.items()],
                                        "total": len(workers)})
            if method == "DELETE" and path.startswith("/workers/"):
                wid = path.split("/")[-1]
                for k, v in list(workers.items()):
                    if v["id"] == wid:
                        if self.smg:
                            v["status"] = "draining"
                            self.draining[(base, k)] = 3
                        else:
                            del workers[k]
                return 202, json.dumps({"status": "accepted", "worker_id": wid})
            if method == "POST" and path == "/workers":
                url = body["url"]
                self.bodies.append((base, body))
                if url in workers:
                    if self.smg:
                        return 409, json.dumps({"error": "Worker %s already exists" % url})
                    return 202, json.dumps({"status": "accepted"})
                workers[url] = {"id": "id-" + url[7:9], "is_healthy": self.up.get(url, False), "load": 0}
                return 202, json.dumps({"status": "accepted"})
        if base in self.in_flight:
            if not self.up[base]:
                return None, "Connection refused"
            if path == "/health":
                return 200, ""
            if path == "/metrics":
                if not self.metrics:
                    return 404, ""
                if base in self.pd_inflight:
                    return 200, PD_METRICS % float(self.pd_inflight[base])
                return 200, METRICS % (float(self.in_flight[base]), 0.0)
        return None, "no route"


def params(**kw):
    base = {"routers": R, "workers": [W[0]], "fleet": W, "state": "drained", "max_unavailable": 1,
            "drain_timeout": 30, "timeout": 10, "poll_interval": 1.0}
    base.update(kw)
    return base


def go(fake, **kw):
    return run(params(**kw), http=fake.http, clock=fake.clock, sleep=fake.sleep)


def test_in_flight_from_sglang_metrics():
    assert _router.in_flight_from_metrics(METRICS % ("3.0", "2.0")) == 5
    assert _router.in_flight_from_metrics("# nothing\nsglang:num_requests_total{} 3\n") is None


def test_in_flight_counts_the_disaggregation_queues():
    """Issue 41 defect 1: a prefill whose 7 requests wait in its inflight queue holds 7, not 0 (the priority
    breakdown is not counted twice); each PD queue of both releases' names counts."""
    assert _router.in_flight_from_metrics(PD_METRICS % "7.0") == 7
    for name in ("num_prefill_bootstrap_queue_reqs", "num_prefill_prealloc_queue_reqs", "num_prefill_inflight_queue_reqs",
                 "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs"):
        assert _router.in_flight_from_metrics('sglang:%s{engine_type="decode",tp_rank="0"} 3.0\n' % name) == 3


def test_a_prefill_with_requests_in_its_inflight_queue_does_not_drain_at_once():
    """Issue 41 defect 1 (fails on 59633b9: drained at once, nothing cut): running and waiting are 0, 7 requests
    wait for a decode server to pull their KV; the drain waits until the inflight queue is empty."""
    fake = pd_fleet()
    fake.pd_inflight[W[0]] = 7
    result = go(fake, workers=[W[0]], kinds=KINDS)
    assert result["drain_seconds"] == 7.0 and result["cut"] == {} and result["in_flight_at_end"] == {W[0]: 0}
    fake = pd_fleet()
    fake.pd_inflight[W[0]] = 7
    result = go(fake, workers=[W[0]], kinds=KINDS, drain_timeout=3)
    assert result["cut"] == {W[0]: 4}


def test_drain_removes_from_every_router_then_waits_for_zero():
    fake = FakeFleet(in_flight={W[0]: 3})
    result = go(fake)
    assert result["changed"] is True
    assert all(W[0] not in listed for listed in fake.lists.values())
    assert [c for c in fake.calls if c[0] == "DELETE"] == [("DELETE", R[0] + "/workers/id-w1"),
                                                           ("DELETE", R[1] + "/workers/id-w1")]
    # removed from every router BEFORE the first look at its metrics
    first_metrics = fake.calls.index(("GET", W[0] + "/metrics"))
    assert first_metrics > fake.calls.index(("DELETE", R[1] + "/workers/id-w1"))
    assert result["cut"] == {} and result["in_flight_at_end"] == {W[0]: 0}
    assert result["drain_seconds"] == 3.0


def test_drain_timeout_reports_what_was_cut():
    fake = FakeFleet(in_flight={W[0]: 100})
    result = go(fake, drain_timeout=5)
    assert result["cut"] == {W[0]: 95} and result["drain_seconds"] == 5.0


def test_drain_without_metrics_waits_the_timeout_and_says_so():
    fake = FakeFleet(metrics=False)
    result = go(fake, drain_timeout=4)
    assert result["metrics_unavailable"] == [W[0]] and result["drain_seconds"] == 4.0


def test_refused_over_max_unavailable_with_nothing_changed():
    fake = FakeFleet()
    fake.lists[R[1]][W[2]]["is_healthy"] = False          # w3 is already out on gw-2
    with pytest.raises(Refused, match="max_unavailable=1"):
        go(fake)
    assert not [c for c in fake.calls if c[0] != "GET"]
    assert W[0] in fake.lists[R[0]] and W[0] in fake.lists[R[1]]


def test_refused_for_the_last_healthy_worker():
    fake = FakeFleet(workers=[W[0]])
    with pytest.raises(Refused, match="last healthy worker"):
        go(fake, fleet=[W[0]], max_unavailable=5)
    assert not [c for c in fake.calls if c[0] != "GET"]


def test_undrain_waits_for_worker_health_then_adds_everywhere_and_is_idempotent():
    fake = FakeFleet()
    go(fake)
    fake.up[W[0]] = False
    with pytest.raises(RouterError, match="not put back"):
        go(fake, state="present", timeout=3)
    assert all(W[0] not in listed for listed in fake.lists.values())   # never added while down
    fake.up[W[0]] = True
    result = go(fake, state="present")
    assert result["changed"] is True
    assert all(listed[W[0]]["is_healthy"] for listed in fake.lists.values())
    again = go(fake, state="present")
    assert again["changed"] is False
    assert go(fake, state="verified")["changed"] is False


def test_verified_fails_when_a_router_lists_a_worker_unhealthy():
    fake = FakeFleet()
    fake.lists[R[1]][W[3]]["is_healthy"] = False
    with pytest.raises(RouterError, match="w4:30000 not healthy on http://gw-2:30000"):
        go(fake, state="verified", workers=W, timeout=2)


def test_check_mode_changes_nothing():
    fake = FakeFleet()
    result = run(params(), http=fake.http, clock=fake.clock, sleep=fake.sleep, check_mode=True)
    assert result["changed"] is True
    assert W[0] in fake.lists[R[0]]
    assert not [c for c in fake.calls if c[0] != "GET"]


def test_module_refuses_a_batch_over_max_unavailable_before_any_call():
    args = {"ANSIBLE_MODULE_ARGS": {"routers": ["http://127.0.0.1:9"], "workers": W[:2], "state": "drained"}}
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".cache", "collections"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", "sglang_router_workers.py")],
                          input=json.dumps(args), capture_output=True, text=True, env=env, check=False)
    out = json.loads(proc.stdout)
    assert out["failed"] and "more than max_unavailable=1" in out["msg"]


# --- issue 23: the key on a re-add, SMG's "already exists", one identity per worker, reconcile ------------------

def test_readd_hands_the_workers_key_to_every_router():
    fake = FakeFleet()
    go(fake)
    go(fake, state="present", worker_api_key="sk-worker")
    assert [b for r, b in fake.bodies] == [{"url": W[0], "api_key": "sk-worker"}] * 2
    assert all(listed[W[0]]["is_healthy"] for listed in fake.lists.values())


def test_the_drain_waits_until_smg_no_longer_lists_the_worker_at_all():
    # SMG keeps a removed worker listed as "draining" for a few polls: the restart that follows the drain must not
    # begin while a router still names the worker (issue 39: the faster rollout met it in molecule/router_ha)
    fake = FakeFleet()
    fake.smg = True
    go(fake)
    assert all(W[0] not in listed for listed in fake.lists.values())


def test_readd_while_smg_still_drains_the_old_entry_posts_again():
    fake = FakeFleet()
    fake.smg = True
    go(fake)
    for router in R:               # another tool removed it just now: SMG still lists it as draining
        fake.lists[router][W[0]] = {"id": "id-w0", "is_healthy": False, "load": 0, "status": "draining"}
        fake.draining[(router, W[0])] = 3
    result = go(fake, state="present")
    assert result["changed"] is True
    # the 409 "already exists" was not taken for success: posted again once the old entry was gone
    posts = [r for r, b in fake.bodies]
    assert posts.count(R[0]) >= 2
    assert all(W[0] in listed and "status" not in listed[W[0]] for listed in fake.lists.values())


def test_drain_finds_the_worker_by_the_address_the_routers_list():
    ip = "http://10.0.0.1:30000"
    fake = FakeFleet(workers=[ip] + W[1:])
    fake.in_flight[ip] = 2
    fake.up[ip] = True
    result = go(fake, aliases={W[0]: [ip]})
    assert all(ip not in listed for listed in fake.lists.values())
    assert result["listed_as"] == {R[0]: {W[0]: ip}, R[1]: {W[0]: ip}}
    assert result["in_flight_at_end"] == {W[0]: 0}              # asked where the routers reach it
    assert ("GET", ip + "/metrics") in fake.calls
    again = go(fake, state="present", listed_as=result["listed_as"], aliases={W[0]: [ip]})
    assert again["changed"] is True
    assert [b["url"] for r, b in fake.bodies] == [ip, ip]       # put back as it was listed, not twice
    assert all(ip in listed and W[0] not in listed for listed in fake.lists.values())


def test_a_batch_no_router_lists_is_refused_naming_what_they_list():
    ip = "http://10.0.0.1:30000"
    fake = FakeFleet(workers=[ip] + W[1:])
    fake.up[W[0]] = True
    fake.in_flight[W[0]] = 0
    with pytest.raises(Refused, match=r"listed by no router.*gw-1:30000 lists http://10.0.0.1:30000"):
        go(fake)
    assert not [c for c in fake.calls if c[0] != "GET"]


def test_a_worker_left_out_earlier_is_put_back_before_the_next_drain():
    fake = FakeFleet()
    for listed in fake.lists.values():          # an earlier re-add failed: w3 is out of both routers
        del listed[W[2]]
    result = go(fake)                           # drain w1: before, "already out: w3" refused it for good
    assert result["put_back"] == {W[2]: R}
    assert all(W[2] in listed and W[0] not in listed for listed in fake.lists.values())


def test_a_down_worker_is_not_put_back_and_still_counts_as_out():
    fake = FakeFleet()
    for listed in fake.lists.values():
        del listed[W[2]]
    fake.up[W[2]] = False
    with pytest.raises(Refused, match="max_unavailable=1"):
        go(fake)
    assert not [c for c in fake.calls if c[0] != "GET"]


def test_reconciled_puts_back_a_healthy_worker_and_says_so():
    fake = FakeFleet()
    del fake.lists[R[1]][W[3]]
    result = go(fake, state="reconciled", workers=W, timeout=5)
    assert result["changed"] is True and result["put_back"] == {W[3]: [R[1]]}
    assert go(fake, state="reconciled", workers=W, timeout=5)["changed"] is False


def test_reconciled_waits_for_a_router_that_was_just_restarted():
    """The router role verifies right after its restart: the first GET /workers is refused (molecule/router)."""
    fake = FakeFleet(routers=[R[0]])
    fake.router_down_calls = 5
    del fake.lists[R[0]][W[1]]
    result = go(fake, routers=[R[0]], state="reconciled", workers=W, timeout=30)
    assert result["put_back"] == {W[1]: [R[0]]}
    assert all(fake.lists[R[0]][w]["is_healthy"] for w in W)


# ---- prefill/decode servers behind a gateway in PD mode (issue 25) -------------------------------------------------
KINDS = {W[0]: {"worker_type": "prefill", "bootstrap_port": 8998}, W[1]: {"worker_type": "prefill", "bootstrap_port": 9100},
         W[2]: {"worker_type": "decode", "bootstrap_port": None}, W[3]: {"worker_type": "decode", "bootstrap_port": None}}


def pd_fleet():
    """Both gateways in PD mode list each worker with its worker_type and a prefill's bootstrap_port (measured)."""
    fake = FakeFleet()
    for listed in fake.lists.values():
        for url, kind in KINDS.items():
            listed[url].update(kind)
    return fake


def test_a_drained_prefill_server_is_put_back_as_a_prefill_with_its_bootstrap_port():
    fake = pd_fleet()
    go(fake, workers=[W[1]], kinds=KINDS)
    go(fake, workers=[W[1]], kinds=KINDS, state="present")
    bodies = [body for _router_url, body in fake.bodies]
    assert bodies == [{"url": W[1], "worker_type": "prefill", "bootstrap_port": 9100}] * 2
    # not given by the inventory: put back as the kind the router listed it as before the drain
    fake = pd_fleet()
    drained = go(fake, workers=[W[2]])
    assert drained["kinds"] == {W[2]: {"worker_type": "decode", "bootstrap_port": None}}
    go(fake, workers=[W[2]], state="present", kinds=drained["kinds"])
    assert [body for _r, body in fake.bodies] == [{"url": W[2], "worker_type": "decode"}] * 2


def test_never_the_last_healthy_worker_of_either_kind():
    fake = pd_fleet()
    fake.lists[R[0]][W[3]]["is_healthy"] = False           # d2 is out on gw-1: d1 is its last healthy decode
    with pytest.raises(Refused, match="last healthy decode worker"):
        go(fake, workers=[W[2]], kinds=KINDS, max_unavailable=2)
    assert not [c for c in fake.calls if c[0] != "GET"]
    # the same router still lets a prefill go: one prefill stays
    fake.lists[R[0]][W[3]]["is_healthy"] = True
    go(fake, workers=[W[0]], kinds=KINDS)
    assert all(W[0] not in listed for listed in fake.lists.values())
    fake = pd_fleet()
    with pytest.raises(Refused, match="last healthy prefill worker"):
        go(fake, workers=[W[0], W[1]], kinds=KINDS, max_unavailable=2)


# ---- a worker left out on purpose (issue 41 defect 4) --------------------------------------------------------------
def test_a_worker_held_out_on_purpose_is_never_put_back_until_a_run_verifies_it(tmp_path):
    """Fails on 59633b9 (any worker whose /health answers 200 was put back): w3's rollback did not verify, the
    rollout recorded it held out; its /health says 200 (a configuration that did not verify may answer), yet
    neither the router role's reconcile nor the next drain puts it back; the re-add after a verified restart does
    and clears the record."""
    record = str(tmp_path / "held" / "router-held-out.json")
    fake = FakeFleet()
    for listed in fake.lists.values():
        del listed[W[2]]
    held = go(fake, workers=[W[2]], state="held_out", held_out_file=record, reason="rollback did not verify")
    assert held["changed"] is True and held["held_out"] == [W[2]] and not fake.calls
    assert oct(os.stat(record).st_mode & 0o777) == "0o600"
    assert go(fake, workers=[W[2]], state="held_out", held_out_file=record)["changed"] is False
    # the router role's verify: nothing put back, not waited for, said so
    result = go(fake, state="reconciled", workers=W, timeout=5, held_out_file=record)
    assert result["put_back"] == {} and result["changed"] is False and result["held_out"] == [W[2]]
    assert all(W[2] not in listed for listed in fake.lists.values())
    # the next drain of another worker: not put back first, and it still counts as out (max_unavailable=1)
    with pytest.raises(Refused, match="max_unavailable=1"):
        go(fake, held_out_file=record)
    assert all(W[2] not in listed for listed in fake.lists.values())
    result = go(fake, max_unavailable=2, held_out_file=record)
    assert result["put_back"] == {} and result["held_out"] == [W[2]]
    # a run that verifies it: put back (state present) and the record cleared
    back = go(fake, workers=[W[2]], state="present", held_out_file=record)
    assert back["changed"] is True and back["held_out"] == []
    assert json.load(open(record))["held_out"] == {}
    assert all(W[2] in listed for listed in fake.lists.values())


def test_released_clears_the_record_and_an_unreadable_record_refuses(tmp_path):
    record = tmp_path / "router-held-out.json"
    fake = FakeFleet()
    go(fake, workers=[W[2]], state="held_out", held_out_file=str(record))
    assert go(fake, workers=[W[2]], state="released", held_out_file=str(record))["held_out"] == []
    record.write_text("{not json")
    with pytest.raises(RouterError, match="not JSON"):
        go(fake, state="reconciled", workers=W, held_out_file=str(record))


def test_a_router_is_judged_by_its_readiness_not_its_health():
    """Issue 41 (fails on 59633b9, which asked /health): a gateway that is stopping or draining answers /health 200
    and /readiness 503; the verify does not call it serving."""
    fake = FakeFleet(routers=[R[0]])
    fake.not_ready.add(R[0])
    with pytest.raises(RouterError, match="/readiness not 200"):
        go(fake, routers=[R[0]], state="verified", workers=W, timeout=3)
    fake.not_ready.clear()
    assert go(fake, routers=[R[0]], state="verified", workers=W, timeout=3)["changed"] is False
