# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_packages.py against a fake apt (dpkg-query, apt-get) and a temporary /var/lib/apt: the cache is
judged by its content (an emptied lists directory is young and stale), and every install is proven by the package
database afterwards (issue 48: a freshly built image's `make demo` reported "installed g++" and had none)."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _packages as pk


class Apt(object):
    """A Debian host's apt: ``available`` is what the package lists hold (nothing until apt-get update fills them),
    ``installed`` what dpkg knows. apt-get install of a name in no list installs nothing and exits 0, as apt does
    when it reads the name as a pattern (g++)."""

    def __init__(self, lists, repository=("g++", "patch")):
        self.lists = lists
        self.repository = set(repository)
        self.available = set()
        self.installed = {"python3"}
        self.calls = []

    def which(self, name):
        return None if name in ("dnf", "yum", "rpm") else "/usr/bin/" + name

    def run(self, argv, data=None, environ_update=None):
        self.calls.append(list(argv))
        if argv[0] == "dpkg-query":
            return 0, "".join("%s\tinstalled\t1\n" % n for n in argv[3:] if n in self.installed), ""
        if argv[:2] == ["apt-get", "update"]:
            self.available = set(self.repository)
            with open(os.path.join(self.lists, "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages"), "w"):
                pass
            return 0, "Reading package lists...", ""
        if argv[:2] == ["apt-get", "install"]:
            names = [a for a in argv[3:] if not a.startswith("-") and not a.startswith("Dpkg")]
            self.installed.update(n for n in names if n in self.available)
            return 0, "0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.", ""
        return 127, "", "unknown command %s" % argv


@pytest.fixture
def apt(tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    return Apt(str(lists))


def _packages(apt, now=None):
    stamp = os.stat(apt.lists).st_mtime
    return pk.Packages(apt.run, apt.which, clock=lambda: (now if now is not None else stamp + 60),
                       stamps=(apt.lists,), lists=apt.lists)


def test_emptied_lists_minutes_old_are_stale(apt):
    """The freshly built image: /var/lib/apt/lists emptied a minute ago. The old rule read its mtime as a cache
    younger than an hour and skipped the update."""
    packages = _packages(apt)
    assert not packages.has_lists()
    assert packages.ensure(["g++"]) == ["apt-get update", "installed g++"]
    assert ["apt-get", "update"] in apt.calls and "g++" in apt.installed


def test_young_cache_with_lists_is_not_updated_again(apt):
    apt.run(["apt-get", "update"])
    apt.calls = []
    packages = _packages(apt)
    assert packages.has_lists()
    assert packages.ensure(["patch"]) == ["installed patch"]
    assert ["apt-get", "update"] not in apt.calls


def test_old_cache_with_lists_is_updated(apt):
    apt.run(["apt-get", "update"])
    apt.calls = []
    packages = _packages(apt, now=os.stat(apt.lists).st_mtime + pk.CACHE_VALID_TIME + 1)
    assert packages.ensure(["patch"])[0] == "apt-get update"


def test_an_install_that_installed_nothing_names_the_package(apt):
    """apt-get install exits 0 and installs nothing: an error naming the package, never "installed"."""
    apt.run(["apt-get", "update"])
    packages = _packages(apt)
    with pytest.raises(pk.PackageError) as failure:
        packages.ensure(["g++", "no-such-package"])
    text = str(failure.value)
    assert "did not install no-such-package" in text and "g++," not in text
    assert "0 newly installed" in text


def test_present_packages_cost_one_query(apt):
    apt.installed.add("g++")
    packages = _packages(apt)
    assert packages.ensure(["g++"]) == []
    assert [c[0] for c in apt.calls] == ["dpkg-query"]


def test_check_mode_installs_nothing_and_says_what_it_would(apt):
    packages = pk.Packages(apt.run, apt.which, check_mode=True, stamps=(apt.lists,), lists=apt.lists)
    assert packages.ensure(["g++"]) == ["apt-get update", "installed g++"]
    assert [c[0] for c in apt.calls] == ["dpkg-query"]
