# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cuda role's structure and the files it writes: the inputs, the lease, ONE call of gpuserve.sglang.cuda_toolkit
(issue 39), the rendered profile script and loader entry, the preflight's refusals and the verify phase's .cu test."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import COLLECTIONS, MODULE_PYTHON, ROOT as CHECKOUT, run_play_batch
from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit import repo as f

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(ROOT, "roles", "cuda")


def run_play(tmp_path, play, args=()):
    """conftest.run_play with command-line arguments as they are (--tags, -e NAME=VALUE)."""
    path = tmp_path / "play.yml"
    path.write_text(play)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + MODULE_PYTHON, str(path)] + list(args)
    proc = subprocess.run(cmd, env=env, cwd=CHECKOUT, capture_output=True, text=True, timeout=600, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _tasks(tasks):
    """Every task of a task list, the tasks of blocks included."""
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key) or [])


def test_inputs_then_one_module_call_under_the_lease():
    """Issue 39: the role is a table of contents - the inputs, the lease (joined inside a playbook's), ONE call of
    the module and the facts; the phase tags pick the module's phases (vars/main.yml)."""
    main = _yaml("tasks", "main.yml")
    assert main[0]["ansible.builtin.import_tasks"] == "inputs.yml"
    assert set(main[0]["tags"]) == {"cuda_preflight", "cuda_install", "cuda_configure", "cuda_verify"}
    # one include: the toolkit inside this run's lease, or leased.yml (take, the toolkit, give back)
    assert main[1]["ansible.builtin.include_tasks"]["file"] == \
        "{{ 'toolkit.yml' if sglang_lease.holds | default(false) else 'leased.yml' }}"
    assert set(main[1]["tags"]) == set(main[0]["tags"])
    take, toolkit = _yaml("tasks", "leased.yml")[0]["block"]
    assert take["ansible.builtin.include_tasks"]["file"] == "lease.yml"
    assert toolkit["ansible.builtin.import_tasks"] == "toolkit.yml"
    # cuda_preflight or cuda_verify alone change nothing: no lease taken for them
    assert take["when"] == "_cuda_phases | difference(['verify']) | length > 0"
    calls = _yaml("tasks", "toolkit.yml")
    assert [k for t in calls for k in t if k.startswith(("ansible.", "gpuserve."))] == \
        ["gpuserve.sglang.cuda_toolkit", "ansible.builtin.set_fact"]
    assert calls[0]["gpuserve.sglang.cuda_toolkit"]["phases"] == "{{ _cuda_phases }}"
    assert sorted(os.listdir(os.path.join(ROLE, "tasks"))) == ["inputs.yml", "lease.yml", "leased.yml", "main.yml",
                                                               "preflight.yml", "toolkit.yml"]
    modules = [key for name in os.listdir(os.path.join(ROLE, "tasks")) for task in _tasks(_yaml("tasks", name))
               for key in task if key.startswith(("ansible.", "gpuserve."))]
    assert sorted(set(modules)) == ["ansible.builtin.assert", "ansible.builtin.import_tasks",
                                    "ansible.builtin.include_role", "ansible.builtin.include_tasks",
                                    "ansible.builtin.set_fact", "gpuserve.sglang.cuda_toolkit"]


PHASES = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_vars: {{ role_vars }}
      tags: [always]
    - ansible.builtin.debug:
        msg: "PHASES {{ _cuda_phases | to_json }}"
      tags: [always]
"""


@pytest.mark.parametrize("args,phases", [
    ([], ["install", "configure", "verify"]),
    (["--tags", "cuda"], ["install", "configure", "verify"]),
    (["--tags", "cuda_verify"], ["verify"]),
    (["--tags", "cuda_install,cuda_configure"], ["install", "configure"]),
    (["--tags", "cuda_preflight"], []),
    (["--skip-tags", "cuda_verify"], ["install", "configure"]),
])
def test_the_phase_tags_pick_the_modules_phases(tmp_path, args, phases):
    play = PHASES.replace("{{ role_vars }}", os.path.join(ROLE, "vars", "main.yml"))
    rc, out = run_play(tmp_path, play, args)
    assert rc == 0, out
    assert "PHASES %s" % json.dumps(phases) in out.replace('\\"', '"'), out


def test_default_pip_packages_pin_one_build():
    pkgs = _yaml("defaults", "main.yml")["cuda_pip_packages"]
    # nvidia-cuda-nvcc 13.0.88 depends on nvidia-nvvm and nvidia-cuda-crt WITHOUT a version: only the extras pin them
    assert pkgs == ["cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2"]


FACTS = {"cuda_home": "/usr/local/cuda-13.0", "cuda_version": "13.0", "cuda_bin": "/usr/local/cuda-13.0/bin",
         "cuda_lib": "/usr/local/cuda-13.0/lib64", "cuda_install_method": "pip",
         "cuda_ldconfig_file": "/etc/ld.so.conf.d/cuda-gpuserve.conf"}


def _profile(**facts):
    facts = dict(FACTS, **facts)
    return f.profile_text(facts["cuda_home"], facts["cuda_version"], facts["cuda_install_method"],
                          facts["cuda_ldconfig_file"])


def test_ld_so_conf_names_lib64():
    text = f.ldconfig_text(FACTS["cuda_lib"], "13.0", "pip")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["/usr/local/cuda-13.0/lib64"]


@pytest.mark.parametrize("path_before,path_after", [
    ("/usr/bin:/bin", "/usr/local/cuda-13.0/bin:/usr/bin:/bin"),
    ("/usr/local/cuda-13.0/bin:/usr/bin", "/usr/local/cuda-13.0/bin:/usr/bin"),  # sourced twice: no duplicate
])
def test_profile_script_in_a_real_shell(tmp_path, path_before, path_after):
    script = tmp_path / "cuda.sh"
    script.write_text(_profile())
    out = subprocess.run(["sh", "-c", '. "$1"; echo "$CUDA_HOME"; echo "$PATH"', "sh", str(script)],
                         env={"PATH": path_before}, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["/usr/local/cuda-13.0", path_after]


def test_keyring_name_matches_the_sources_file_it_replaces():
    # cuda-keyring writes /etc/apt/sources.list.d/cuda-<distro>-<arch>.list; the role writes the same path.
    for distro in f.SUPPORTED_DISTROS:
        for arch in f.SUPPORTED_ARCHES:
            r = f.cuda_repo("13.0", distro, arch, mirror="file:///srv/cuda")
            assert r["sources_file"].endswith("cuda-%s-%s.list" % (distro, arch))
            assert r["sources_line"] == ("deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
                                         "file:///srv/cuda/%s/%s/ /" % (distro, arch))


@pytest.mark.parametrize("home", ["/opt/cuda $(touch {marker})", "/opt/cuda'; touch {marker}; '",
                                  "/opt/cuda\ntouch {marker}", "/opt/cuda `touch {marker}`"])
def test_profile_script_quotes_every_value(tmp_path, home):
    """Issue 14: /etc/profile.d/cuda.sh wrote CUDA_HOME unquoted: a crafted cuda_prefix ran in every login shell."""
    marker = tmp_path / "pwned"
    home = home.format(marker=marker)
    script = tmp_path / "cuda.sh"
    script.write_text(_profile(cuda_home=home))
    out = subprocess.run(["sh", "-c", '. "$1"; printf "%s|" "$CUDA_HOME" "$PATH"', "sh", str(script)],
                         env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True).stdout
    assert not marker.exists()
    assert out == "%s|%s/bin:/usr/bin:/bin|" % (home, home)


VERIFY_SCRIPT = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.cuda
        apply:
          tags: [cuda_verify]
      vars:
        cuda_install_method: existing
        cuda_prefix: "{{ bin | dirname }}"
        cuda_symlink: ""
        cuda_manage_environment: false
        _cuda_verify_dir: "{{ dir }}"
        cuda_nvidia_smi: /nonexistent/nvidia-smi
      tags: [cuda_verify]
    - ansible.builtin.debug:
        msg: "VERIFIED {{ _cuda.msg }} {{ cuda_nvcc_version }}"
      tags: [cuda_verify]
"""


def test_verify_places_the_cu_test_once_and_compiles_it(tmp_path):
    """A stand-in nvcc (copies its source to -o and prints a release line) against the role under --tags
    cuda_verify (the module's verify phase alone, no lease): the source arrives byte for byte, root:root 0644,
    reported changed once, then left alone (and not compiled again: it passed on this nvcc in this boot)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    nvcc = bindir / "nvcc"
    nvcc.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "Cuda compilation tools, release 13.0, V13.0.88";'
                    ' exit 0; fi\ncp "$3" "$2"\n')
    nvcc.chmod(0o755)
    verify_dir = tmp_path / "cuda-verify"
    extra = ["-e", "bin=%s" % bindir, "-e", "dir=%s" % verify_dir, "--tags", "cuda_verify"]
    rc, out = run_play(tmp_path, VERIFY_SCRIPT, extra)
    assert rc == 0, out
    placed = verify_dir / "cuda_verify.cu"
    with open(os.path.join(ROLE, "files", "cuda_verify.cu"), "rb") as handle:
        assert placed.read_bytes() == handle.read()
    assert oct(os.stat(str(placed)).st_mode & 0o777) == "0o644"
    assert "changed=1" in out
    rc, out = run_play(tmp_path, VERIFY_SCRIPT, extra)
    assert rc == 0, out
    # the same test on the same nvcc in the same boot: proven earlier, not compiled again
    assert "changed=0" in out and "no GPU here (compile-only test passed; the .cu test passed" in out
    assert "not compiled again (cuda_verify_every_run)" in " ".join(out.split())   # the callback wraps lines


PREFLIGHT = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.cuda
        tasks_from: preflight.yml
    - ansible.builtin.debug:
        msg: "PASSED {{ cuda_home }}"
"""


def test_preflight_reads_real_paths_and_keeps_its_refusals(tmp_path):
    """The preflight alone (tasks_from: preflight.yml, the module without a phase) against real files: each
    refusal's message as it was with the stat tasks."""
    tree = tmp_path / "tree"
    (tree / "home-dir" / "bin").mkdir(parents=True)
    (tree / "home-dir" / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (tree / "home-noexec" / "bin").mkdir(parents=True)
    (tree / "home-noexec" / "bin" / "nvcc").write_text("not executable\n")
    (tree / "home-dir" / "bin" / "nvcc").chmod(0o755)
    (tree / "home-file").write_text("")
    (tree / "wheel").mkdir()
    os.symlink(str(tree / "wheel"), str(tree / "home-link"))
    (tree / "realdir").mkdir()
    t = str(tree)
    base = {"cuda_repo_distro": "debian12", "cuda_repo_arch": "x86_64", "cuda_symlink": t + "/cuda"}
    cases = {
        "existing-missing": {"cuda_install_method": "existing", "cuda_prefix": t + "/none"},
        "existing-noexec": {"cuda_install_method": "existing", "cuda_prefix": t + "/home-noexec"},
        "existing-file": {"cuda_install_method": "existing", "cuda_prefix": t + "/home-file"},
        "existing-ok": {"cuda_install_method": "existing", "cuda_prefix": t + "/home-dir"},
        "pip-dir": {"cuda_install_method": "pip", "cuda_prefix": t + "/home-dir"},
        "pip-file": {"cuda_install_method": "pip", "cuda_prefix": t + "/home-file"},
        "pip-link": {"cuda_install_method": "pip", "cuda_prefix": t + "/home-link"},
        "pip-realdir-symlink": {"cuda_install_method": "pip", "cuda_prefix": t + "/home-link",
                                "cuda_symlink": t + "/realdir"},
        "pip-realdir-unmanaged": {"cuda_install_method": "pip", "cuda_prefix": t + "/home-link",
                                  "cuda_symlink": t + "/realdir", "cuda_manage_environment": False},
    }
    results = run_play_batch(tmp_path, PREFLIGHT, {name: dict(base, **case) for name, case in cases.items()})

    def refused(name, text):
        rc, out = results[name]
        assert rc != 0 and "PASSED" not in out, out
        assert text in " ".join(out.split()), out

    refused("existing-missing", "cuda_install_method=existing, but there is no CUDA 13.0 here: %s/none/bin/nvcc does "
            "not exist. Install CUDA 13.0 at %s/none first, point cuda_prefix at the real CUDA home, or use "
            "cuda_install_method=nvidia_repo or pip." % (t, t))
    refused("existing-noexec", "here: %s/home-noexec/bin/nvcc is missing or not executable." % t)
    refused("existing-file", "here: %s/home-file/bin/nvcc is missing or not executable." % t)
    refused("pip-dir", "cuda_install_method=pip manages %s/home-dir as a symlink into /opt/sglang/cuda-venv, but "
            "%s/home-dir is a real directory (a toolkit installed another way?). Use cuda_install_method=existing "
            "for it, or set cuda_prefix to another path." % (t, t))
    refused("pip-file", "but %s/home-file is a real file (a toolkit" % t)
    refused("pip-realdir-symlink", "%s/realdir is a real directory, not a link; the role will not delete it to point "
            "it at %s/home-link. Move it away, or set cuda_symlink to \"\" to leave it alone." % (t, t))
    # each refusal before anything changed, and saying so
    for name in ("existing-missing", "existing-noexec", "existing-file", "pip-dir", "pip-file", "pip-realdir-symlink"):
        assert "Nothing was changed on the host." in " ".join(results[name][1].split()), name
    for name, home in (("existing-ok", "/home-dir"), ("pip-link", "/home-link"), ("pip-realdir-unmanaged", "/home-link")):
        rc, out = results[name]
        assert rc == 0, out
        assert "PASSED %s%s" % (t, home) in out, out
