# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the checkout importable as ansible_collections.gpuserve.sglang for unit tests."""
import contextlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpuserve", "sglang")
if not os.path.exists(LINK):
    subprocess.check_call([os.path.join(ROOT, "scripts", "collection-link.sh")])
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

FIXTURES = os.path.join(ROOT, "tests", "fixtures")

# A play that runs the router role's preflight on every inventory host (tests/unit/roles: add the tasks that read
# what it registered).
ROUTER_PREFLIGHT_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.router
        tasks_from: preflight.yml
"""


def reader(values):
    """A role-variable reader as the action plugins get one (plugin_utils/_role_vars.py): ``read(name[, default])``
    over a dict; an undefined name without a default raises KeyError."""
    def read(name, default=KeyError):
        if name in values:
            return values[name]
        if default is KeyError:
            raise KeyError(name)
        return default
    return read


def calls_in_roles_and_playbooks(words):
    """Every "path: word" where a file under roles/ or playbooks/ names one of ``words`` (a whole word): the scan
    that a deprecated filter or a removed variable is called nowhere."""
    found = []
    for folder in ("roles", "playbooks"):
        for top, dummy, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                path = os.path.join(top, name)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
                found += ["%s: %s" % (os.path.relpath(path, ROOT), word) for word in words
                          if re.search(r"\b%s\b" % re.escape(word), text)]
    return found


def load_file(name, path):
    """A Python file that is not an importable module (a script under scripts/, a file a role ships) loaded as the
    module `name`, for the tests to call its functions."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STANDIN_MODEL = os.path.join(ROOT, "tests", "standin", "make_standin_model.py")


def make_standin_model(kind, path):
    """A stand-in model directory in the real formats (tests/standin/make_standin_model.py: config.json, the
    safetensors shards and their index, a few bytes per tensor): what the server role's model preflight reads."""
    subprocess.run([sys.executable, STANDIN_MODEL, kind, str(path)], check=True)
    return str(path)


TESTHOST_PYC = os.path.join(ROOT, "tests", "testhost", "gpuserve_test_pyc.py")


def _module_python():
    """The interpreter the plays of these tests run their modules with (ansible_python_interpreter): a bare venv
    of this interpreter (modules use the standard library only) whose site-packages load the test hosts'
    bytecode cache for AnsiballZ payloads (tests/testhost/gpuserve_test_pyc.py; the molecule hosts have the same),
    so a module run does not compile ansible.module_utils from source each time. Made once per checkout and
    interpreter in .cache/module-python-<X.Y> (again when the fixture or this interpreter changes); where it cannot
    be made, this interpreter. One per interpreter: the controller matrix runs the plugin tests on Python 3.11 and
    the unit step on 3.12, and a `make controllers` beside a `make unit` must not remake the other's venv under it."""
    venv = os.path.join(ROOT, ".cache", "module-python-%d.%d" % sys.version_info[:2])
    python = os.path.join(venv, "bin", "python")
    with open(TESTHOST_PYC, "rb") as handle:
        fixture = handle.read()
    # the fixture and the interpreter: a checkout whose controller moved to another Python makes it again
    made_by = fixture + ("\n# made by %s %s\n" % (sys.executable, sys.version.split()[0])).encode()
    stamp = os.path.join(venv, "fixture.py")
    try:
        with open(stamp, "rb") as handle:
            if handle.read() == made_by and os.access(python, os.X_OK):
                return python
    except OSError:
        pass
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", venv], check=True,
                       capture_output=True, timeout=600)
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True, timeout=600).stdout.strip()
        with open(os.path.join(site, "gpuserve_test_pyc.py"), "wb") as handle:
            handle.write(fixture)
        with open(os.path.join(site, "gpuserve-test-pyc.pth"), "w", encoding="utf-8") as handle:
            handle.write("import gpuserve_test_pyc\n")
        with open(stamp, "wb") as handle:
            handle.write(made_by)
        return python
    except (OSError, subprocess.SubprocessError):
        return sys.executable


MODULE_PYTHON = _module_python()
# the bytecode cache of the modules these tests run, in the checkout's cache (inherited by ansible-playbook)
os.environ.setdefault("GPUSERVE_TEST_PYC_DIR", os.path.join(ROOT, ".cache", "test-pyc"))


def run_play(tmp_path, play, extra_vars=()):
    """Run a playbook text on this machine (connection local, the checkout as gpuserve.sglang); extra_vars are
    -e arguments. Returns (return code, stdout + stderr). The timeout only stops a hung play: under make test the
    unit tests share two cores with three molecule scenarios, and a play of six `due` rounds took more than
    300 s there (49 s alone)."""
    path = tmp_path / "play.yml"
    path.write_text(play)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + MODULE_PYTHON, str(path)]
    for item in extra_vars:
        cmd += ["-e", item]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _host_text(result):
    """One task result of one host as text to search: its JSON, and its messages and output as they read."""
    parts = [json.dumps(result, sort_keys=True)]
    for key in ("msg", "stdout", "stderr", "module_stdout", "module_stderr", "warnings"):
        value = result.get(key)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(str(item) for item in value)
    for item in result.get("results") or []:
        if isinstance(item, dict):
            parts.append(_host_text(item))
    return "\n".join(parts)


def run_play_batch(tmp_dir, play, cases, timeout=3600):
    """Run one play for several cases in ONE ansible-playbook: each case is an inventory host (connection local,
    modules run by MODULE_PYTHON) whose host variables are the case's variables, so the play's tasks, the roles' defaults,
    argument_specs and asserts run for every case as they would for `run_play(..., [json.dumps(variables)])`,
    without one controller start-up per case. The play must target `hosts: all`.

    cases: {case id: variables}. Returns {case id: (0 or 1, text)}: 1 when a task failed or the host was
    unreachable; the text holds each of that host's task results (JSON, then msg/stdout/stderr as they read)
    and its recap line ("changed=N failed=N"). Host variables sit below -e extra vars, role vars and set_fact in
    Ansible's precedence: a case must not set a variable that the role's vars/ or a set_fact also sets."""
    names = {case: "case%d" % index for index, case in enumerate(cases)}
    hosts = {names[case]: dict(variables, ansible_connection="local", ansible_python_interpreter=MODULE_PYTHON)
             for case, variables in cases.items()}
    inventory = os.path.join(str(tmp_dir), "batch-inventory.json")
    with open(inventory, "w", encoding="utf-8") as handle:
        json.dump({"all": {"hosts": hosts}}, handle)
    path = os.path.join(str(tmp_dir), "batch-play.yml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(play)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_JSON_INDENT="0",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_FORKS="10")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, path]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    try:
        report = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        raise AssertionError("the batched play gave no report (rc %d):\n%s\n%s"
                             % (proc.returncode, proc.stdout, proc.stderr)) from None
    texts = {name: [] for name in hosts}
    for play_report in report.get("plays", []):
        for task in play_report.get("tasks", []):
            for name, result in task.get("hosts", {}).items():
                if name in texts:
                    texts[name].append("TASK [%s]\n%s" % (task.get("task", {}).get("name", ""), _host_text(result)))
    results = {}
    for case, name in names.items():
        stats = report.get("stats", {}).get(name, {})
        failed = stats.get("failures", 0) or stats.get("unreachable", 0) or not stats
        recap = "%s : ok=%d changed=%d unreachable=%d failed=%d" % (
            name, stats.get("ok", 0), stats.get("changed", 0), stats.get("unreachable", 0), stats.get("failures", 0))
        results[case] = (1 if failed else 0, "\n".join(texts[name] + [recap, proc.stderr]))
    return results


def run_preflight_batch(tmp_dir, play, base, refused, passing):
    """The usual shape of a preflight's refusal tests through run_play_batch: each (name, value) of ``refused``
    and each variables dict of ``passing`` is one case over the ``base`` variables. Returns {batch_key(case
    variables): (rc, text)}."""
    cases = [{name: value} for name, value in refused] + list(passing)
    return run_play_batch(tmp_dir, play, {batch_key(case): dict(base, **case) for case in cases})


def batch_key(variables):
    """The key of a case's result in run_preflight_batch's answer."""
    return json.dumps(variables, sort_keys=True)


def fake_nvidia_smi(tmp_path, query_gpu, apps, table=""):
    """An nvidia-smi test double in tmp_path/bin that prints the given texts (real captures where the test has
    them): --query-gpu=..., --query-compute-apps=..., and the plain table; any other call exits 3."""
    data = tmp_path / "smi-data"
    data.mkdir()
    (data / "query-gpu").write_text(query_gpu)
    (data / "apps").write_text(apps)
    (data / "table").write_text(table)
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir(exist_ok=True)
    script.write_text(
        "#!/bin/sh\n"
        "case \"$1\" in\n"
        "  --query-gpu=*) cat %(d)s/query-gpu ;;\n"
        "  --query-compute-apps=*) cat %(d)s/apps ;;\n"
        "  '') cat %(d)s/table ;;\n"
        "  *) exit 3 ;;\n"
        "esac\n" % {"d": data})
    script.chmod(0o755)
    return script


STANDIN = os.path.join(ROOT, "tests", "standin", "sglang_standin.py")


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def until(condition, bound=60):
    """Poll condition every 50 ms until it holds (True) or ``bound`` seconds passed (False): a hang guard, never
    a timing assertion."""
    deadline = time.time() + bound
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def http_call(method, url, body=None, key=None, timeout=60):
    """(status, text) of one JSON request without a proxy; (None, reason) when nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer %s" % key)
    try:
        with NO_PROXY.open(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)


def free_port():
    """A local TCP port that was free a moment ago."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@contextlib.contextmanager
def standin_server(args=(), env=None):
    """The stand-in SGLang server (tests/standin, a test fixture) on a free local port, until /health answers 200;
    yields its base URL and stops it afterwards."""
    port = free_port()
    environ = dict(os.environ, STANDIN_LOAD_SECONDS="0.2", STANDIN_WARMUP_SECONDS="0.1")
    environ.update(env or {})
    proc = subprocess.Popen([sys.executable, STANDIN, "--port", str(port)] + list(args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environ)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = "http://127.0.0.1:%d" % port
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if opener.open(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait()
