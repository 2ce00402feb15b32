# SPDX-License-Identifier: GPL-3.0-or-later
"""The recovery harness of a server over several hosts (issue 47): the module's group phases (prepare, restart,
decide, commit; the rescue's finish) on fake nodes, sequenced as roles/server/tasks/group.yml sequences them with
the ONE verdict function (module_utils/_server/group.py), with the run killed at EVERY step boundary on every node
(between nodes too), a commit that fails on one node, and the invariant checked after the killed run's next run:
every node serves a verified set, the group's sets are all old or all new, never mixed, nothing is left open,
nothing kept that was not verified."""
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._server import group as group_mod
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import LifecycleFailure

from server_fakes import Host

NODES = ["node-0", "node-1", "node-2"]
STEPS = ["prepare", "restart", "decide", "commit"]


class Killed(Exception):
    """The controller died: the run stops where it is, on every node."""


class Group(object):
    def __init__(self, tmp_path):
        self.hosts = {}
        for name in NODES:
            host = Host(tmp_path / name)
            host.write(host.nccl, "NCCL_P2P_LEVEL=SYS\n")
            host.write(host.site, "import os  # v1\n")
            host.write(host.record, '{"sglang": "0.5.9"}\n')
            self.hosts[name] = host
        self.runs = 0
        self.commit_fails = set()     # nodes whose commit fails (a full /etc, the second verification)

    def call(self, name, phase, version, run_id, results, decision=None, reason=""):
        host = self.hosts[name]
        machine = host.machine(host.desired(version), gates_here=name == NODES[0], group=run_id,
                               force_restart=group_mod.verdict(NODES, results, NODES, "prepare", run_id)["due"])
        try:
            if name in self.commit_fails and (phase == "commit" or (phase == "finish" and decision["keep"])):
                raise LifecycleFailure("%s: keep failed: No space left on device" % name,
                                       dict(machine.result, group_decision="commit"))
            if phase == "finish":
                result = machine.finish_group(decision["group"], decision["keep"], reason)
            else:
                result = getattr(machine, phase)()
        except LifecycleFailure as exc:
            result = dict(exc.result, failed=True, msg=exc.msg)
        result["phase"] = phase
        results[name] = result
        return result

    def run(self, version, kill=None):
        """One ansible-playbook run of group.yml. ``kill``: (step, node index) - the run dies before that node
        runs that step. Returns 'ok' or 'failed' (the rescue ran)."""
        self.runs += 1
        run_id = "run-%d" % self.runs
        results, failed = {}, set()
        for step in STEPS:
            for index, name in enumerate(NODES):
                if kill == (step, index):
                    raise Killed()
                if name in failed:
                    continue
                if self.call(name, step, version, run_id, results).get("failed"):
                    failed.add(name)
            if step in ("prepare", "restart"):
                verdict = group_mod.verdict(NODES, results, [n for n in NODES if n not in failed], step, run_id)
                if verdict["problems"]:
                    failed.update(NODES)
            if failed and step in ("prepare", "restart"):
                break
        if not failed:
            return "ok"
        decision = group_mod.verdict(NODES, results, NODES, "prepare", run_id)["decision"]
        for index, name in enumerate(NODES):
            if kill == ("finish", index):
                raise Killed()
            if name in failed:
                self.call(name, "finish", version, run_id, results, decision, "the group's verdict was a no")
        return "failed"

    def converge(self, version):
        """Runs until one succeeds (an open change is finished first, then the change applies)."""
        outcomes = [self.run(version) for _run in range(3)]
        assert "ok" in outcomes, outcomes
        return outcomes

    def versions(self):
        return dict((n, h.read(h.unit).rsplit("--v ", 1)[1].strip()) for n, h in self.hosts.items())

    def check_invariant(self):
        versions = set(self.versions().values())
        assert len(versions) == 1, "mixed sets: %s" % self.versions()
        for name, host in self.hosts.items():
            props = host.systemctl.props
            assert props["ActiveState"] == "active", name
            manifest = host.read(host.last_good + "/manifest.json")
            assert manifest and ('"invocation_id": "%s"' % props["InvocationID"]) in manifest, name
            assert not os.path.exists(host.last_good + "/txn.json"), name
        return versions.pop()


@pytest.fixture
def group(tmp_path):
    group = Group(tmp_path)
    assert group.run("1") == "ok"
    assert group.check_invariant() == "1"
    return group


def test_a_group_change_restarts_every_node_and_keeps_it_everywhere(group):
    assert group.run("2") == "ok"
    assert group.check_invariant() == "2"
    for host in group.hosts.values():
        assert '"group": "run-2"' in host.read(host.last_good + "/manifest.json")


def test_a_no_op_group_run_opens_no_transaction_and_restarts_nothing(group):
    """7d0d57e: the restart phase of a run with nothing due opened a transaction on every node; killed before the
    commit, the next run restarted every node (defect 5)."""
    invocations = dict((n, h.systemctl.props["InvocationID"]) for n, h in group.hosts.items())
    with pytest.raises(Killed):
        group.run("1", kill=("commit", 0))
    for host in group.hosts.values():
        assert not os.path.exists(host.last_good + "/txn.json")
    assert group.run("1") == "ok"
    assert dict((n, h.systemctl.props["InvocationID"]) for n, h in group.hosts.items()) == invocations


def test_a_commit_that_fails_on_one_node_restores_no_node(group):
    """7d0d57e: the node whose commit failed was restored alone, breaking the running group; the nodes' last good
    sets diverged (defect 2). Now the decision to keep was recorded on every node before any committed: the
    failed node's commit is retried, never restored alone; the next run finishes it."""
    group.commit_fails.add("node-1")
    assert group.run("2") == "failed"
    assert set(group.versions().values()) == {"2"}
    failed = group.hosts["node-1"]
    assert os.path.exists(failed.last_good + "/txn.json")       # its commit is still owed
    group.commit_fails.clear()
    group.converge("2")
    assert group.check_invariant() == "2"


@pytest.mark.parametrize("step", STEPS + ["finish"])
@pytest.mark.parametrize("index", range(len(NODES)))
def test_a_run_killed_at_any_step_boundary_is_finished_by_the_next(group, step, index):
    """The invariant after a kill before node ``index`` runs ``step`` of a change (1 -> 2), and the runs after."""
    if step == "finish":
        group.commit_fails.add("node-1")      # a rescue that runs (the commit failed on node 1), killed in it
        if index > 1:
            pytest.skip("only node 1 runs the rescue")
    with pytest.raises(Killed):
        group.run("2", kill=(step, index))
    group.commit_fails.clear()
    group.converge("2")
    assert group.check_invariant() == "2"


def test_a_killed_decide_keeps_on_every_node_where_any_node_recorded_it(group):
    """Killed after node 0 recorded the decision and before node 1: presumed abort would restore nodes 1 and 2 while
    node 0's change is decided kept; the verdict keeps on every node (never mixed)."""
    with pytest.raises(Killed):
        group.run("2", kill=("decide", 1))
    assert group.run("2") == "failed"          # this run finishes the earlier change, applies nothing of its own
    assert group.check_invariant() == "2"


def test_a_killed_restart_is_rolled_back_on_every_node(group):
    """No decision recorded anywhere: presumed abort, every node back on its last good set."""
    with pytest.raises(Killed):
        group.run("2", kill=("decide", 0))
    assert group.run("3", kill=None) == "failed"
    assert group.check_invariant() == "1"
    assert group.run("3") == "ok" and group.check_invariant() == "3"


def test_check_mode_of_a_group_shows_the_forced_restart(group):
    """7d0d57e: --check of the restart phase on a node where nothing changed said nothing would restart (defect 9)."""
    host = group.hosts["node-2"]
    machine = host.machine(host.desired("1"), check_mode=True, gates_here=False)
    result = machine.restart(force=True)
    assert result["action"] == "restart" and result["changed"]
    assert "a restart is due on another node of this server" in result["reasons"]


def test_a_no_op_group_run_writes_nothing(group):
    """The set kept under a group change stays under it: a later run with nothing due rewrites no manifest (the
    idempotence of molecule/multinode caught the commit rewriting it under each run's id)."""
    before = dict((n, h.snapshot()) for n, h in group.hosts.items())
    assert group.run("1") == "ok"
    assert dict((n, h.snapshot()) for n, h in group.hosts.items()) == before


class KilledInside(BaseException):
    """The controller and the module died INSIDE a node's step (a reboot, an OOM kill): nothing after that point
    of the step ran; a BaseException, so that no handler of the module takes it for a failure."""


# where a commit can die between two of its writes: after the change's "verified" phase, after one copy of the
# new set (the manifest not switched yet), after the switch to the new manifest, after the change's record was
# removed (the deployment record and the claim not written yet)
INSIDE_COMMIT = [("txn", "set_phase"), ("_last_good", "_write_atomic"), ("_last_good", "keep"), ("txn", "close")]


@pytest.mark.parametrize("point", INSIDE_COMMIT, ids=["-".join(p) for p in INSIDE_COMMIT])
@pytest.mark.parametrize("index", range(len(NODES)))
def test_a_run_killed_inside_a_nodes_commit_is_kept_on_every_node_by_the_next(group, monkeypatch, point, index):
    """molecule/multinode kills a real run in its commit phase, where the module dies inside its step, not between
    steps: the next run keeps the change on every node (the decision was recorded before any commit), restarts
    nothing, applies nothing of its own; the run after that is a no-op."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good
    from ansible_collections.gpuserve.sglang.plugins.module_utils._server import txn as txn_module

    module = txn_module if point[0] == "txn" else _last_good
    original = getattr(module, point[1])
    target = NODES[index]
    call = group.call

    def dying(*args, **kwargs):
        original(*args, **kwargs)
        raise KilledInside()

    def call_and_die(name, phase, *args, **kwargs):
        if (name, phase) != (target, "commit"):
            return call(name, phase, *args, **kwargs)
        monkeypatch.setattr(module, point[1], dying)
        try:
            return call(name, phase, *args, **kwargs)
        finally:
            monkeypatch.setattr(module, point[1], original)

    group.call = call_and_die
    with pytest.raises(KilledInside):
        group.run("2")
    group.call = call
    assert set(group.versions().values()) == {"2"}
    invocations = dict((n, h.systemctl.props["InvocationID"]) for n, h in group.hosts.items())
    left_open = [n for n, h in group.hosts.items() if os.path.exists(h.last_good + "/txn.json")]
    assert left_open or point == ("txn", "close")
    # it finishes the killed run's change as decided, kept everywhere, and applies nothing of its own; where every
    # node had closed its change (killed after the last close) the run has nothing to finish and changes nothing
    assert group.run("2") == ("failed" if left_open else "ok")
    assert group.check_invariant() == "2"
    for host in group.hosts.values():
        assert '"group": "run-2"' in host.read(host.last_good + "/manifest.json")
    assert dict((n, h.systemctl.props["InvocationID"]) for n, h in group.hosts.items()) == invocations
    before = dict((n, h.snapshot()) for n, h in group.hosts.items())
    assert group.run("2") == "ok"
    assert dict((n, h.snapshot()) for n, h in group.hosts.items()) == before


def test_a_decided_change_is_finished_first_where_another_nodes_later_change_is_open(group):
    """Killed in its commit (node 0 committed run 2, nodes 1 and 2 hold it open, decided), then the next run killed
    before its rescue (node 0 had landed run 3, its own change, open): the run after that found two open changes and
    took node 0's for the one to finish, because node 0 comes first. Undecided, it was rolled back, and nodes 1 and 2
    refused to restore their change decided kept: that run failed without finishing the decision. Now the change
    decided (or kept on a node) is the one finished: node 0's landed files go back, nodes 1 and 2 commit."""
    with pytest.raises(Killed):
        group.run("2", kill=("commit", 1))
    with pytest.raises(Killed):
        group.run("3", kill=("finish", 0))
    opened = dict((n, h.read(h.last_good + "/txn.json")) for n, h in group.hosts.items())
    assert '"group": "run-3"' in opened["node-0"] and all('"group": "run-2"' in opened[n] for n in NODES[1:])
    assert group.run("3") == "failed"          # it finishes run 2's change everywhere, applies nothing of its own
    assert group.check_invariant() == "2"
    for host in group.hosts.values():
        assert '"group": "run-2"' in host.read(host.last_good + "/manifest.json")
    assert group.run("3") == "ok" and group.check_invariant() == "3"
