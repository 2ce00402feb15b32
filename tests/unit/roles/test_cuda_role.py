# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cuda role's structure and templates: phases with tags, the rendered files."""
from __future__ import annotations

import json
import os
import shlex
import subprocess

import jinja2
import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter import cuda_repo as f

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(ROOT, "roles", "cuda")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_phases_and_tags():
    main = _yaml("tasks", "main.yml")
    files = [t["ansible.builtin.include_tasks"]["file"] for t in main]
    assert files == ["preflight.yml", "install.yml", "configure.yml", "verify.yml"]
    for task, tag in zip(main[1:], ["cuda_install", "cuda_configure", "cuda_verify"]):
        assert task["tags"] == [tag]
        assert task["ansible.builtin.include_tasks"]["apply"]["tags"] == [tag]
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
