# SPDX-License-Identifier: GPL-3.0-or-later
"""The built collection tarball installs, and its modules, roles and playbooks are found by FQCN."""
import glob
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")


def _bin(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.skip("%s is not in .venv (make venv)" % name)
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([_bin("ansible-galaxy"), "collection", "build", "--output-path", str(dist), ROOT],
                   check=True, capture_output=True, text=True)
    tarball = glob.glob(str(dist / "gpuserve-sglang-*.tar.gz"))[0]
    target = tmp_path_factory.mktemp("collections")
    # Only the installed copy may be found: no ansible.cfg, no collections path but the target.
    empty_cfg = tmp_path_factory.mktemp("cfg") / "ansible.cfg"
    empty_cfg.write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(target), ANSIBLE_CONFIG=str(empty_cfg), ANSIBLE_NOCOLOR="1")
    subprocess.run([_bin("ansible-galaxy"), "collection", "install", "--force", "-p", str(target), tarball],
                   check=True, capture_output=True, text=True, env=env, cwd=str(target))
    return target, env


MODULES = ["sglang_service", "nvidia_gpu_info", "sglang_memory_plan"]
ROLES = ["preflight", "cuda", "install", "nccl_tuning", "server", "_common"]


def _ansible_doc(installed, *args):
    """One ansible-doc over several names (each call loads the whole plugin set: one per kind, not one per name)."""
    target, env = installed
    proc = subprocess.run([_bin("ansible-doc")] + list(args), capture_output=True, text=True,
                          env=dict(env, ANSIBLE_NOCOLOR="1"), cwd=str(target), check=False)
    return proc


@pytest.fixture(scope="module")
def module_docs(installed):
    return _ansible_doc(installed, *["gpuserve.sglang." + m for m in MODULES])


@pytest.fixture(scope="module")
def role_docs(installed):
    return _ansible_doc(installed, "-t", "role", *["gpuserve.sglang." + r for r in ROLES])


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_finds_each_module(installed, module_docs, module):
    target = installed[0]
    assert module_docs.returncode == 0, module_docs.stderr
    where = os.path.join(str(target), "ansible_collections", "gpuserve", "sglang", "plugins", "modules", module + ".py")
    assert "> MODULE gpuserve.sglang.%s (%s)" % (module, where) in module_docs.stdout


@pytest.mark.parametrize("role", ROLES)
def test_ansible_doc_finds_each_role(installed, role_docs, role):
    target = installed[0]
    assert role_docs.returncode == 0, role_docs.stderr
    where = os.path.join(str(target), "ansible_collections", "gpuserve", "sglang")
    assert "ROLE: *gpuserve.sglang.%s* (%s)" % (role, where) in role_docs.stdout


def test_playbooks_by_fqcn_parse(installed):
    target, env = installed
    for playbook in ("deploy", "restart", "verify", "plan"):
        proc = subprocess.run([_bin("ansible-playbook"), "--syntax-check", "-i", "localhost,",
                               "gpuserve.sglang." + playbook], capture_output=True, text=True, env=env,
                              cwd=str(target), check=False)
        assert proc.returncode == 0, playbook + ": " + proc.stdout + proc.stderr


def test_tarball_leaves_out_tests_and_caches(installed):
    target = installed[0]
    root = os.path.join(str(target), "ansible_collections", "gpuserve", "sglang")
    present = set(os.listdir(root))
    assert {"roles", "plugins", "playbooks", "meta", "docs", "MANIFEST.json"} <= present
    assert not present & {"molecule", "tests", ".venv", ".cache", "benchmarks", "scripts"}


# The tarball as a new user gets it (issue 42): installed by ansible-galaxy itself (which, since 2.21, enforces
# meta/runtime.yml's requires_ansible) on a Python 3.13 controller venv of ansible-core 2.21 and of the newest
# ansible-core on PyPI, pre-releases included (scripts/ansible-core-version.py: 2.22.0rc1 on 2026-12-06), and a role
# of the installed copy run by that controller's ansible-playbook with nothing but the install directory on the
# collections path. The venvs are scripts/controller-venv.sh's, cached per machine (the "latest" one is the
# controller matrix's own).
INSTALL_CONTROLLERS = [("2.21.5", "3.13"), ("latest", "3.13")]
PLAY = """\
- name: A role of the installed collection
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The preflight role's memory plan, from numbers (no GPU and no model directory here)
      ansible.builtin.include_role:
        name: gpuserve.sglang.preflight
      vars:
        sglang_preflight_require_gpus: false
        sglang_preflight_check_paths: false
        sglang_preflight_tp: 8
        sglang_preflight_mem_fraction_static: 0.88
        sglang_preflight_hicache_ratio: 4.0
        sglang_preflight_model_geometry: {attention: mla, kv_lora_rank: 512, qk_rope_head_dim: 64, num_layers: 61}
        sglang_preflight_gpu_memory_gb: 94.99
        sglang_preflight_weights_gb_per_gpu: 72.3
        sglang_preflight_mem_available_gb: 396
        sglang_preflight_log_dir: /tmp
        sglang_preflight_min_free_disk_gb: 0
    - name: The plan the role kept
      ansible.builtin.assert:
        that:
          - sglang_memory_plan.fits
          - sglang_memory_plan.cell_size_bytes == 70272
"""


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    dist = tmp_path_factory.mktemp("release-dist")
    subprocess.run([_bin("ansible-galaxy"), "collection", "build", "--output-path", str(dist), ROOT],
                   check=True, capture_output=True, text=True)
    return glob.glob(str(dist / "gpuserve-sglang-*.tar.gz"))[0]


@pytest.mark.parametrize("core,python", INSTALL_CONTROLLERS, ids=["-".join(c) for c in INSTALL_CONTROLLERS])
def test_the_tarball_installs_with_ansible_galaxy_and_its_role_runs_from_the_installed_copy(
        tarball, tmp_path, core, python):
    made = subprocess.run([os.path.join(ROOT, "scripts", "controller-venv.sh"), core, python],
                          capture_output=True, text=True, check=False, timeout=1800)
    assert made.returncode == 0, made.stderr
    venv = made.stdout.strip().splitlines()[-1]
    target = tmp_path / "collections"
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(target), ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), PATH=os.path.join(venv, "bin") + os.pathsep + env["PATH"])
    # no --force, no --ignore-errors: ansible-galaxy's own checks, requires_ansible among them
    inst = subprocess.run([os.path.join(venv, "bin", "ansible-galaxy"), "collection", "install", "-p", str(target),
                           tarball], capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    installed = os.path.join(str(target), "ansible_collections", "gpuserve", "sglang")
    assert "was installed successfully" in inst.stdout and os.path.isdir(os.path.join(installed, "roles"))
    (tmp_path / "play.yml").write_text(PLAY)
    run = subprocess.run([os.path.join(venv, "bin", "ansible-playbook"), "-vv", "-i", "localhost,", "-c", "local",
                          "-e", "ansible_python_interpreter=" + os.path.join(venv, "bin", "python"), "play.yml"],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "ansible-playbook [core %s]" % subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", "import ansible.release as r; print(r.__version__)"],
        capture_output=True, text=True, check=True).stdout.strip() in run.stdout
    # every task of the role came from the installed copy, none from the checkout
    paths = [line.split("task path: ", 1)[1] for line in run.stdout.splitlines() if line.startswith("task path: ")]
    role_paths = [p for p in paths if "/roles/preflight/" in p]
    assert role_paths and all(p.startswith(installed + os.sep) for p in role_paths), role_paths[:3]
    assert not [p for p in paths if p.startswith(ROOT + os.sep)]
