# SPDX-License-Identifier: GPL-3.0-or-later
"""The last-good set (module_utils/_last_good.py, the sglang_server module's): the manifest format, which files the
running invocation does not have, the copies and manifest written by rename only where they differ."""
import hashlib
import json
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good as lg

from conftest import ROOT


def _state(exists, sha256="ab" * 32, mode="0644"):
    state = {"exists": exists}
    if exists:
        state.update(sha256=sha256, mode=mode, owner="root", group="sglang", mtime=1.0)
    return state


def test_manifest_lists_each_file_and_where_its_copy_is():
    restorable = ["/etc/sglang/nccl.env", "/site/sitecustomize.py", "/site/gpuserve_nccl_tuning.pth",
                  "/etc/sglang/k.secrets.yaml"]
    states = [("/etc/sglang/nccl.env", _state(True, "11" * 32)), ("/site/sitecustomize.py", _state(True)),
              ("/site/gpuserve_nccl_tuning.pth", _state(False)),
              ("/etc/sglang/k.secrets.yaml", _state(True, "22" * 32, "0640")),
              ("/opt/sglang/install-record.json", _state(True, "33" * 32))]
    manifest = lg.manifest(states, "inv1", restorable, "/b/last-good/", ["/etc/sglang/k.secrets.yaml"])
    files = manifest["files"]
    assert manifest["invocation_id"] == "inv1"
    assert files["/etc/sglang/nccl.env"]["sha256"] == "11" * 32
    assert files["/etc/sglang/nccl.env"]["kept_at"] == (
        "/b/last-good/" + hashlib.sha1(b"/etc/sglang/nccl.env").hexdigest() + ".inv1")   # named after the invocation
    assert files["/etc/sglang/nccl.env"]["restorable"] is True
    # a restorable file that was not there: a rollback removes it
    assert files["/site/gpuserve_nccl_tuning.pth"] == {"exists": False, "restorable": True}
    # the secret's hash never lands in the manifest, its mode does; no copy and not restorable although the
    # caller listed it (issue 39: a rollback must not undo a rotated key), unless the operator asks
    assert "sha256" not in files["/etc/sglang/k.secrets.yaml"]
    assert files["/etc/sglang/k.secrets.yaml"]["mode"] == "0640"
    assert files["/etc/sglang/k.secrets.yaml"]["group"] == "sglang"
    assert "kept_at" not in files["/etc/sglang/k.secrets.yaml"] and "restorable" not in files["/etc/sglang/k.secrets.yaml"]
    assert "secrets_kept" not in manifest
    kept = lg.manifest(states, "inv1", restorable, "/b/last-good/", ["/etc/sglang/k.secrets.yaml"], keep_secrets=True)
    assert kept["files"]["/etc/sglang/k.secrets.yaml"]["restorable"] is True and kept["secrets_kept"] is True
    assert "kept_at" in kept["files"]["/etc/sglang/k.secrets.yaml"]
    # the install record is read, not restored
    assert "kept_at" not in files["/opt/sglang/install-record.json"]
    assert "restorable" not in files["/opt/sglang/install-record.json"]


def test_manifest_text_is_what_the_role_wrote_before():
    """The earlier tasks wrote the manifest with Ansible's to_nice_json: the same bytes, so an upgraded host's
    manifest is not rewritten (no change on the first run after the upgrade)."""
    from ansible.plugins.filter.core import to_nice_json
    data = {"invocation_id": "inv", "files": {"/b": {"exists": True, "sha256": "x", "mode": "0644"},
                                              "/a": {"exists": False, "restorable": True}}}
    assert lg.manifest_text(data) == to_nice_json(data)


def _files(tmp_path):
    unit = tmp_path / "unit.service"
    unit.write_text("[Service]\n")
    env = tmp_path / "nccl.env"
    env.write_text("NCCL_PROTO=Simple\n")
    secret = tmp_path / "k.secrets.yaml"
    secret.write_text("api-key: sk-1\n")
    return [str(unit), str(env), str(secret), str(tmp_path / "absent.pth"), str(tmp_path / "record.json")]


def test_keep_writes_copies_then_manifest_and_nothing_the_second_time(tmp_path):
    paths = _files(tmp_path)
    directory = str(tmp_path / "backup" / "last-good")
    first = lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv1")
    assert first["changed"]
    assert not os.path.exists(lg.copy_path(directory, paths[2], "inv1"))   # the secrets file: no copy (issue 39)
    for path in paths[:2]:
        copy = lg.copy_path(directory, path, "inv1")
        assert open(copy).read() == open(path).read()
        assert oct(os.stat(copy).st_mode & 0o777) == "0o600"
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    on_disk = json.load(open(os.path.join(directory, "manifest.json")))
    assert on_disk == first["manifest"]
    assert on_disk["files"][paths[3]] == {"exists": False, "restorable": True}
    assert "sha256" not in on_disk["files"][paths[2]]
    assert on_disk["files"][paths[1]]["sha256"] == hashlib.sha256(b"NCCL_PROTO=Simple\n").hexdigest()
    assert not [name for name in os.listdir(directory) if name.startswith(".tmp-")]
    again = lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv1")
    assert not again["changed"] and again["written"] == []
    # one file changes: its copy and the manifest are written, nothing else
    with open(paths[1], "w") as handle:
        handle.write("NCCL_PROTO=LL\n")
    third = lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv1")
    assert third["written"] == [lg.copy_path(directory, paths[1], "inv1"), os.path.join(directory, "manifest.json")]


def test_keep_in_check_mode_writes_nothing(tmp_path):
    paths = _files(tmp_path)
    directory = str(tmp_path / "last-good")
    result = lg.keep(directory, paths, restorable=paths[:2], invocation_id="inv1", check_mode=True)
    assert result["changed"] and directory in result["written"]
    assert not os.path.exists(directory)


def test_a_failed_write_leaves_the_old_manifest_whole(tmp_path, monkeypatch):
    paths = _files(tmp_path)
    directory = str(tmp_path / "last-good")
    lg.keep(directory, paths, restorable=paths[:2], invocation_id="inv1")
    before = open(os.path.join(directory, "manifest.json")).read()

    def full_disk(*_args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(lg.os, "fsync", full_disk)
    with pytest.raises(OSError):
        lg.keep(directory, paths, restorable=paths[:2], invocation_id="inv2")
    assert open(os.path.join(directory, "manifest.json")).read() == before
    assert not [name for name in os.listdir(directory) if name.startswith(".tmp-")]


def test_a_new_set_replaces_the_old_one_whole_and_a_kill_before_the_switch_leaves_the_old_one(tmp_path, monkeypatch):
    """The copies of a new invocation get their own names; the manifest's rename is the switch; the old copies
    go only after it. Killed before the switch (here: the manifest's write fails), the old manifest still names
    the old copies, whole and unchanged - never files that did not run together (issue 22)."""
    paths = _files(tmp_path)
    directory = str(tmp_path / "last-good")
    lg.keep(directory, paths, restorable=paths[:3], invocation_id="inv1")
    old_manifest = open(os.path.join(directory, "manifest.json")).read()
    with open(paths[1], "w") as handle:
        handle.write("NCCL_PROTO=LL\n")
    real_write = lg._write_atomic

    def killed_at_the_manifest(dest, data):
        if dest.endswith("manifest.json"):
            raise OSError(28, "No space left on device")
        real_write(dest, data)
    monkeypatch.setattr(lg, "_write_atomic", killed_at_the_manifest)
    with pytest.raises(OSError):
        lg.keep(directory, paths, restorable=paths[:3], invocation_id="inv2")
    assert open(os.path.join(directory, "manifest.json")).read() == old_manifest
    for entry in json.loads(old_manifest)["files"].values():
        if "kept_at" in entry:
            assert os.path.exists(entry["kept_at"])
    assert open(lg.copy_path(directory, paths[1], "inv1")).read() == "NCCL_PROTO=Simple\n"
    # the next run completes the switch and removes the old set's copies (and the half-written new ones' names
    # are its own)
    monkeypatch.setattr(lg, "_write_atomic", real_write)
    done = lg.keep(directory, paths, restorable=paths[:3], invocation_id="inv2")
    names = sorted(os.listdir(directory))
    assert names == sorted(["manifest.json"] + [os.path.basename(lg.copy_path(directory, p, "inv2")) for p in paths[:3]])
    assert lg.copy_path(directory, paths[0], "inv1") in done["written"]


def test_copies_of_the_layout_before_are_removed_after_the_switch(tmp_path):
    paths = _files(tmp_path)
    directory = tmp_path / "last-good"
    directory.mkdir()
    old = directory / hashlib.sha1(paths[1].encode()).hexdigest()   # <sha1> alone: the tasks' layout
    old.write_text("old copy")
    other = directory / "operator-notes.txt"
    other.write_text("kept")
    lg.keep(str(directory), paths, restorable=paths[:2], invocation_id="inv1")
    assert not old.exists() and other.exists()


def test_read_names_newer_files_and_those_gone_since_this_invocations_start(tmp_path):
    paths = _files(tmp_path)
    directory = str(tmp_path / "last-good")
    lg.keep(directory, paths, restorable=paths[:4], invocation_id="inv1")
    started = int(os.stat(paths[0]).st_mtime) + 10
    for path in paths[:3]:
        os.utime(path, (started - 5, started - 5))
    os.utime(paths[1], (started + 1, started + 1))          # written after the start
    os.utime(paths[2], (started + 0.5, started + 0.5))      # within the start's second: older
    assert lg.read(directory, paths, started, "inv1")["stale"] == [paths[1]]
    os.unlink(paths[0])                                      # the unit the verified start had is gone
    assert lg.read(directory, paths, started, "inv1")["stale"] == [paths[1], paths[0]]
    # another invocation's manifest says nothing of this one; a stopped unit has nothing stale
    assert lg.read(directory, paths, started, "inv2")["stale"] == [paths[1]]
    assert lg.read(directory, paths, 0, "inv1")["stale"] == []
    state = lg.read(directory, paths, started, "inv1")
    assert state["files"][paths[0]] == {"exists": False} and state["files"][paths[1]]["exists"]
    assert state["manifest"]["invocation_id"] == "inv1"


def test_read_survives_a_broken_manifest_and_says_so(tmp_path):
    directory = tmp_path / "last-good"
    directory.mkdir()
    (directory / "manifest.json").write_text("{not json")
    result = lg.read(str(directory), [str(tmp_path / "x")], 100, "inv")
    assert result["manifest"] == {} and "could not be read" in result["problem"]


def test_read_names_the_kept_copies_that_are_gone(tmp_path):
    """The server role skips `kept` on an unchanged host only when every copy the manifest names is there: one
    removed by hand must make the next run write the set again (else a rollback would miss it)."""
    paths = _files(tmp_path)
    directory = str(tmp_path / "backup" / "last-good")
    lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv1")
    assert lg.read(directory, paths, 0, "inv1")["copies_missing"] == []
    gone = lg.copy_path(directory, paths[1], "inv1")
    os.unlink(gone)
    assert lg.read(directory, paths, 0, "inv1")["copies_missing"] == [gone]
    lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv1")
    assert lg.read(directory, paths, 0, "inv1")["copies_missing"] == []


# ---- a rollback killed or failing half way is finished by the next run (issue 39, defect 6) ----------------------
def test_a_rollback_killed_half_way_is_open_and_the_next_run_finishes_it(tmp_path, monkeypatch):
    """Old code: the rollback's copies were tasks, and nothing recorded that one had begun: killed after the stop
    of the failed invocation (or one copy failing), the unit stayed stopped on a mix of files and the next run
    started that mix ("start when not running") without a rollback. Now the restore is open from before the stop
    until the restored set verified, read() says so, and restore() run again puts back what is left."""
    paths = _files(tmp_path)
    directory = str(tmp_path / "backup" / "last-good")
    lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv1")
    good = {path: open(path).read() for path in paths[:3]}
    assert lg.read(directory, paths, 0, "inv1")["restore_open"] == {}
    # a change: new unit, new nccl.env, a new .pth hook the last good start did not have
    for path, text in ((paths[0], "[Service]\nExecStart=/new\n"), (paths[1], "NCCL_PROTO=LL\n"), (paths[3], "x\n")):
        with open(path, "w") as handle:
            handle.write(text)
    opened = lg.begin_restore(directory, reason="the new configuration failed verification")
    assert opened["changed"] and opened["restore_open"]["invocation_id"] == "inv1"
    assert lg.begin_restore(directory)["changed"] is False        # already open: kept as it is
    # the first copy goes back, the second fails (a full disk, or the run is killed there)
    real = lg.write_atomic
    calls = []

    def second_copy_fails(dest, data, **kwargs):
        calls.append(dest)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(dest, data, **kwargs)
    monkeypatch.setattr(lg, "write_atomic", second_copy_fails)
    with pytest.raises(OSError):
        lg.restore(directory)
    monkeypatch.setattr(lg, "write_atomic", real)
    # the next run, whatever the unit's state: the restore is still open
    state = lg.read(directory, paths, 0, "")
    assert state["restore_open"]["invocation_id"] == "inv1"
    assert state["restore_open"]["reason"] == "the new configuration failed verification"
    finished = lg.restore(directory)
    assert finished["missing"] == [] and finished["put_back"] and set(finished["put_back"]) <= set(paths[:3])
    assert {path: open(path).read() for path in paths[:3]} == good and not os.path.exists(paths[3])
    assert lg.restore(directory)["changed"] is False              # nothing left to do
    assert lg.read(directory, paths, 0, "")["restore_open"]       # open until the restored set verified
    closed = lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv2")
    assert os.path.join(directory, lg.RESTORE) in closed["written"]
    assert lg.read(directory, paths, 0, "inv2")["restore_open"] == {}


def test_no_restore_opens_without_a_set_to_go_back_to(tmp_path):
    directory = str(tmp_path / "last-good")
    assert lg.begin_restore(directory) == {"changed": False, "written": [], "restore_open": {}}
    assert lg.restore(directory)["changed"] is False
    assert not os.path.exists(directory)


def _rotate_and_fail(tmp_path, keep_secrets=False):
    """A verified start with key sk-1, then a deploy that rotates the key (and changes the unit) and fails
    verification: the rollback's restore. Returns (paths, directory, what restore() put back)."""
    paths = _files(tmp_path)
    directory = str(tmp_path / "backup" / "last-good")
    # the role lists the secrets file among the restorable ones only when the operator asks; keep() refuses it
    # anyway unless keep_secrets
    lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv1",
            keep_secrets=keep_secrets)
    with open(paths[0], "w") as handle:
        handle.write("[Service]\nExecStart=/new\n")
    with open(paths[2], "w") as handle:
        handle.write("api-key: sk-rotated\n")
    lg.begin_restore(directory, reason="the change failed verification")
    return paths, directory, lg.restore(directory)


def test_the_secrets_file_is_not_kept_and_a_rollback_keeps_the_rotated_key(tmp_path):
    """Issue 39 defect 10: the secrets file was copied into last-good and put back by a rollback, so a deploy that
    rotated a leaked key and then failed verification silently restored the old key."""
    paths, directory, result = _rotate_and_fail(tmp_path)
    assert open(paths[2]).read() == "api-key: sk-rotated\n"          # the rotated key stays
    assert open(paths[0]).read() == "[Service]\n"                     # the rest of the set went back
    assert paths[2] not in result["put_back"] and paths[0] in result["put_back"]
    # no copy of the old key anywhere under the backup directory
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb") as handle:
            assert b"sk-1" not in handle.read(), name


def test_an_operator_who_asks_gets_the_secrets_kept_and_restored(tmp_path):
    paths, directory, result = _rotate_and_fail(tmp_path, keep_secrets=True)
    assert paths[2] in result["put_back"] and open(paths[2]).read() == "api-key: sk-1\n"
    assert os.stat(lg.copy_path(directory, paths[2], "inv1")).st_mode & 0o777 == 0o600


def test_a_manifest_from_before_never_restores_its_secret_copy(tmp_path):
    """A host whose manifest the old code wrote (the secrets file restorable, with a copy): the rollback leaves
    the secrets file as it is, and the next keep removes the old copy."""
    paths = _files(tmp_path)
    directory = str(tmp_path / "backup" / "last-good")
    states = [(path, lg.file_state(path, checksum=True)) for path in paths]
    old = lg.manifest(states, "inv1", paths[:4], directory, [paths[2]], keep_secrets=True)
    old.pop("secrets_kept")                                            # the old code's manifest had no such key
    os.makedirs(directory)
    for path, entry in old["files"].items():
        if "kept_at" in entry:
            with open(path, "rb") as src, open(entry["kept_at"], "wb") as dst:
                dst.write(src.read())
    with open(os.path.join(directory, lg.MANIFEST), "w") as handle:
        handle.write(lg.manifest_text(old))
    with open(paths[2], "w") as handle:
        handle.write("api-key: sk-rotated\n")
    result = lg.restore(directory)
    assert paths[2] not in result["put_back"] and open(paths[2]).read() == "api-key: sk-rotated\n"
    # named explicitly (the role's secret_paths) also when it did not exist then: never removed
    assert lg.restore(directory, secret_paths=[paths[2]])["removed"] == []
    lg.keep(directory, paths, restorable=paths[:4], secret_paths=[paths[2]], invocation_id="inv2")
    assert not os.path.exists(lg.copy_path(directory, paths[2], "inv1"))


def test_the_role_withholds_the_secrets_file_unless_asked():
    """The role hands the choice to gpuserve.sglang.sglang_server (keep_secrets, the secrets file as its secret
    file); the state machine keeps and restores it only then (test_server_machine); the default is false and
    documented."""
    import inspect
    import yaml
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_payload
    role = os.path.join(ROOT, "roles", "server")
    source = inspect.getsource(_server_payload.payload)
    assert '"keep_secrets": v["sglang_last_good_keeps_secrets"]' in source
    assert '"secrets": {"path": v["sglang_secrets_file"]' in source
    with open(os.path.join(role, "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["sglang_last_good_keeps_secrets"] is False
    with open(os.path.join(role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        specs = yaml.safe_load(handle)
    assert specs["argument_specs"]["main"]["options"]["sglang_last_good_keeps_secrets"]["default"] is False
