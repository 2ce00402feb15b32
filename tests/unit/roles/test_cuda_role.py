# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cuda role's structure and templates: phases with tags, the rendered files, its one read of the host and the
verify phase's .cu test (issue 22)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess

import jinja2
import pytest
import yaml

from conftest import run_play, run_play_batch
from ansible_collections.gpuserve.sglang.plugins.filter import cuda_repo as f

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(ROOT, "roles", "cuda")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_phases_and_tags():
    main = _yaml("tasks", "main.yml")
    # static imports: a phase costs no task of its own at run time (issue 20); its tags reach every task of it.
    # The phases after the preflight run under the host lease (test_role_leases.py): the block after its take.
    phases = [main[0]] + main[1]["block"][1:]
    files = [t["ansible.builtin.import_tasks"] for t in phases]
    assert files == ["preflight.yml", "install.yml", "configure.yml", "verify.yml"]
    for task, tag in zip(phases[1:], ["cuda_install", "cuda_configure", "cuda_verify"]):
        assert task["tags"] == [tag]
    # preflight sets the facts, so it runs with every phase tag
    assert set(main[0]["tags"]) == {"cuda_preflight", "cuda_install", "cuda_configure", "cuda_verify"}
    for method in ("nvidia_repo", "pip", "existing"):
        assert os.path.exists(os.path.join(ROLE, "tasks", "install_%s.yml" % method))


def test_default_pip_packages_pin_one_build():
    pkgs = _yaml("defaults", "main.yml")["cuda_pip_packages"]
    # nvidia-cuda-nvcc 13.0.88 depends on nvidia-nvvm and nvidia-cuda-crt WITHOUT a version: only the extras pin them
    assert pkgs == ["cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2"]


def _render(name, **variables):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    env.filters["quote"] = shlex.quote  # Ansible's quote filter
    env.filters["to_json"] = json.dumps
    return env.get_template(name).render(ansible_managed="Ansible managed", **variables)


FACTS = {"cuda_home": "/usr/local/cuda-13.0", "cuda_version": "13.0", "cuda_bin": "/usr/local/cuda-13.0/bin",
         "cuda_lib": "/usr/local/cuda-13.0/lib64", "cuda_install_method": "pip",
         "cuda_ldconfig_file": "/etc/ld.so.conf.d/cuda-gpuserve.conf"}


def test_ld_so_conf_names_lib64():
    lines = [line for line in _render("ld.so.conf.j2", **FACTS).splitlines() if not line.startswith("#")]
    assert lines == ["/usr/local/cuda-13.0/lib64"]


@pytest.mark.parametrize("path_before,path_after", [
    ("/usr/bin:/bin", "/usr/local/cuda-13.0/bin:/usr/bin:/bin"),
    ("/usr/local/cuda-13.0/bin:/usr/bin", "/usr/local/cuda-13.0/bin:/usr/bin"),  # sourced twice: no duplicate
])
def test_profile_script_in_a_real_shell(tmp_path, path_before, path_after):
    script = tmp_path / "cuda.sh"
    script.write_text(_render("cuda.sh.j2", **FACTS))
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
    script.write_text(_render("cuda.sh.j2", **{**FACTS, "cuda_home": home, "cuda_bin": home + "/bin"}))
    out = subprocess.run(["sh", "-c", '. "$1"; printf "%s|" "$CUDA_HOME" "$PATH"', "sh", str(script)],
                         env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True).stdout
    assert not marker.exists()
    assert out == "%s|%s/bin:/usr/bin:/bin|" % (home, home)


def _tasks(tasks):
    """Every task of a task list, the tasks of blocks included."""
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key) or [])


def _modules(name):
    return [key for task in _tasks(_yaml("tasks", name)) for key in task
            if "." in key and key.split(".")[0] in ("ansible", "gpuserve")]


def test_the_host_is_read_by_one_module_and_no_stat_find_or_slurp():
    """Issue 22: the role's reads are one gpuserve.sglang.cuda_host_facts run in the preflight; install_pip and
    configure read again only when the install phase changed the host."""
    everything = [m for name in ("preflight.yml", "install_pip.yml", "install_nvidia_repo.yml", "install_existing.yml",
                                 "configure.yml", "verify.yml") for m in _modules(name)]
    for module in ("ansible.builtin.stat", "ansible.builtin.find", "ansible.builtin.slurp"):
        assert module not in everything
    assert _modules("preflight.yml").count("gpuserve.sglang.cuda_host_facts") == 1
    reads = {name: [t for t in _tasks(_yaml("tasks", name)) if "gpuserve.sglang.cuda_host_facts" in t]
             for name in ("install_pip.yml", "configure.yml")}
    assert reads["configure.yml"][0]["when"] == "_cuda_install_changed | default(false) | bool"
    assert "_cuda_pip_wheels is changed" in " ".join(reads["install_pip.yml"][0]["when"])
    # each install method says whether it changed the host, from every task that can change it
    for name in ("install_pip.yml", "install_nvidia_repo.yml"):
        tasks = _yaml("tasks", name)
        registered = [t["register"] for t in tasks
                      if "register" in t and not any(k.startswith(("gpuserve.", "ansible.builtin.set_fact")) for k in t)]
        # the list of those results is the task's var _cuda_install_steps (no Jinja over 120 characters, issue 39)
        assert tasks[-1]["ansible.builtin.set_fact"]["_cuda_install_changed"] \
            == "{{ _cuda_install_steps | select('changed') | list | length > 0 }}"
        steps = json.dumps(tasks[-1]["vars"]["_cuda_install_steps"])
        assert steps.count("_cuda_") == len(registered)
        for var in registered:
            assert var in steps
        changing = [t for t in tasks if not any(k in t for k in ("ansible.builtin.assert", "ansible.builtin.set_fact",
                                                                 "ansible.builtin.include_role",
                                                                 "gpuserve.sglang.cuda_host_facts"))]
        assert all("register" in t for t in changing), [t["name"] for t in changing if "register" not in t]


def test_verify_places_and_compiles_the_cu_test_in_one_run():
    tasks = list(_tasks(_yaml("tasks", "verify.yml")))
    assert not [t for t in tasks if "ansible.builtin.copy" in t or "ansible.builtin.file" in t]
    compile_task = next(t for t in tasks if "ansible.builtin.shell" in t)
    assert compile_task["ansible.builtin.shell"]["stdin"] == \
        "{{ lookup('ansible.builtin.file', 'cuda_verify.cu', rstrip=false) }}"
    assert compile_task["ansible.builtin.shell"]["stdin_add_newline"] is False
    assert compile_task["register"] == "_cuda_compile"


VERIFY_SCRIPT = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.cuda
        tasks_from: verify.yml
      vars:
        cuda_bin: "{{ bin }}"
        cuda_home: "{{ bin | dirname }}"
        cuda_version: "13.0"
        cuda_gpu_count: 0
        _cuda_verify_dir: "{{ dir }}"
        cuda_nvidia_smi: /nonexistent/nvidia-smi
"""


def test_verify_places_the_cu_test_once_and_compiles_it(tmp_path):
    """A stand-in nvcc (copies its source to -o and prints a release line) against the real verify phase: the
    source arrives byte for byte, root:root 0644, reported changed once, then left alone."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    nvcc = bindir / "nvcc"
    nvcc.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "Cuda compilation tools, release 13.0, V13.0.88";'
                    ' exit 0; fi\ncp "$3" "$2"\n')
    nvcc.chmod(0o755)
    verify_dir = tmp_path / "cuda-verify"
    extra = ["bin=%s" % bindir, "dir=%s" % verify_dir]
    rc, out = run_play(tmp_path, VERIFY_SCRIPT, extra)
    assert rc == 0, out
    placed = verify_dir / "cuda_verify.cu"
    with open(os.path.join(ROLE, "files", "cuda_verify.cu"), "rb") as handle:
        assert placed.read_bytes() == handle.read()
    assert oct(os.stat(str(placed)).st_mode & 0o777) == "0o644"
    assert "changed=1" in out
    rc, out = run_play(tmp_path, VERIFY_SCRIPT, extra)
    assert rc == 0, out
    assert "changed=0" in out and "compile only" in out


PREFLIGHT = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.cuda
        tasks_from: preflight.yml
    - ansible.builtin.debug:
        msg: "PASSED {{ _cuda_host.paths | dict2items | map(attribute='key') | list | to_json }}"
"""


def test_preflight_reads_real_paths_and_keeps_its_refusals(tmp_path):
    """The preflight's one read against real files: each refusal's message as it was with the stat tasks."""
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
    for name, paths in (("existing-ok", [t + "/home-dir", t + "/home-dir/bin/nvcc", t + "/cuda"]),
                        ("pip-link", [t + "/home-link", t + "/home-link/bin/nvcc", t + "/cuda"]),
                        ("pip-realdir-unmanaged", [t + "/home-link", t + "/home-link/bin/nvcc"])):
        rc, out = results[name]
        assert rc == 0, out
        assert "PASSED %s" % json.dumps(paths) in out.replace('\\"', '"'), out
