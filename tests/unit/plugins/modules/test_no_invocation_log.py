# SPDX-License-Identifier: GPL-3.0-or-later
"""No module of the collection writes its options to the host's journal (issue 48): AnsibleModule logs every option
not marked no_log as "Invoked with ..." (journald, else syslog), and a dict option (the environment file's content
inside ``env``, the record's ``env``) is logged as its repr, which the no_log values of its sub-options do not
match: an HF_TOKEN in sglang_env reached the journal on every run, at any verbosity."""
import ast
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
TOKEN = "hf_journalLeakCanary0123456789"

# The module run as Ansible runs it, with AnsibleModule.log writing what it would send to the journal to a file.
WRAPPER = r"""
import runpy, sys
from ansible.module_utils import basic
def log(self, msg, log_args=None):
    if not self.no_log:
        with open(sys.argv[3], "a") as handle:
            handle.write(msg + "\n")
basic.AnsibleModule.log = log
module = sys.argv[1]
sys.argv = [module, sys.argv[2]]
runpy.run_path(module, run_name="__main__")
"""


def journal_lines(tmp_path, module, payload, require_json=True):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": payload}))
    logged = tmp_path / "journal.txt"
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run([sys.executable, "-c", WRAPPER, os.path.join(ROOT, "plugins", "modules", module),
                           str(args_file), str(logged)], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    if require_json:
        assert proc.stdout.strip().startswith("{"), proc.stderr[-2000:]
    return logged.read_text() if logged.exists() else ""


def test_a_token_in_the_environment_reaches_no_journal_line(tmp_path):
    etc = tmp_path / "etc"
    payload = {
        "name": "sglang-t",
        "backup_keep": -1,           # refused after the module started (its invocation logged), before any change
        "unit": {"path": str(etc / "sglang-t.service"), "content": "[Service]\nExecStart=/bin/true\n"},
        "env": {"path": str(etc / "sglang-t.env"), "content": "HF_TOKEN=%s\nA=1\n" % TOKEN},
        "record": {"env": {"HF_TOKEN": TOKEN}, "service": "sglang-t"},
        "backup_dir": str(tmp_path / "backup"),
    }
    text = journal_lines(tmp_path, "sglang_server.py", payload)
    assert TOKEN not in text


# What Ansible adds to every module's arguments for a task without no_log (the task's own no_log is False)
TASK_INTERNALS = {"_ansible_no_log": False, "_ansible_check_mode": False, "_ansible_debug": False,
                  "_ansible_diff": False, "_ansible_verbosity": 0}


def test_a_token_reaches_no_journal_line_when_the_task_itself_has_no_no_log(tmp_path):
    """As a task runs it: the task's _ansible_no_log (False) overrode AnsibleModule(no_log=True), and the whole
    environment file's repr, HF_TOKEN and all, went to the journal (found by molecule/install's secret hunt)."""
    etc = tmp_path / "etc"
    payload = dict(TASK_INTERNALS, **{
        "name": "sglang-t",
        "backup_keep": -1,
        "reason": "the previous failure",
        "unit": {"path": str(etc / "sglang-t.service"), "content": "[Service]\nExecStart=/bin/true\n"},
        "env": {"path": str(etc / "sglang-t.env"), "content": "HF_TOKEN=%s\nA=1\n" % TOKEN},
        "record": {"env": {"HF_TOKEN": TOKEN}, "service": "sglang-t"},
        "backup_dir": str(tmp_path / "backup"),
    })
    text = journal_lines(tmp_path, "sglang_server.py", payload)
    assert TOKEN not in text and "Invoked with" not in text


def test_quiet_module_logs_no_invocation_whatever_the_task_says(tmp_path):
    """QuietModule, built as a task builds a module (its _ansible_no_log False): no "Invoked with" line, where
    AnsibleModule(no_log=True) writes one (the old rule)."""
    script = r"""
import json, sys
from ansible.module_utils import basic
kind = sys.argv[1]
lines = []
basic.AnsibleModule.log = lambda self, msg, log_args=None: lines.append(msg) if not self.no_log else None
with open(sys.argv[4], "w") as handle:
    json.dump({"ANSIBLE_MODULE_ARGS": dict(json.loads(sys.argv[2]), env={"content": "HF_TOKEN=%s" % sys.argv[3]})}, handle)
sys.argv = ["module", sys.argv[4]]
spec = dict(env=dict(type="dict", options=dict(content=dict(type="str", no_log=True))))
if kind == "quiet":
    from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule as cls
else:
    cls = basic.AnsibleModule
cls(argument_spec=spec, no_log=True)
print(json.dumps(lines))
"""
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    out = {}
    for kind in ("quiet", "plain"):
        proc = subprocess.run([sys.executable, "-c", script, kind, json.dumps(TASK_INTERNALS), TOKEN,
                               str(tmp_path / ("args-%s.json" % kind))],
                              capture_output=True, text=True, env=env, timeout=60, check=True)
        out[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["quiet"] == []
    assert any("Invoked with" in line for line in out["plain"])   # what no_log=True alone let through


def test_every_module_is_built_with_no_invocation_log():
    """The one rule for every module, so that a new option carrying a secret cannot bring the leak back."""
    missing = []
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))):
        tree = ast.parse(open(path).read())
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("AnsibleModule", "QuietModule"):
                flags = dict((kw.arg, getattr(kw.value, "value", None)) for kw in call.keywords)
                if flags.get("no_log") is not True:
                    missing.append(os.path.basename(path))
                # a task's _ansible_no_log overrides no_log=True: QuietModule, or (sglang_server.py) the module
                # utils that quiet this process's AnsibleModule
                if call.func.id == "AnsibleModule" and "_server.entry import" not in open(path).read():
                    missing.append(os.path.basename(path) + " (AnsibleModule, not QuietModule)")
    assert missing == []
