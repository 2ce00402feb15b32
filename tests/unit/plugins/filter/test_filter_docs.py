# SPDX-License-Identifier: GPL-3.0-or-later
"""Every filter has a documentation file that loads (ansible-doc -t filter reads it): two once broke on a ': '
inside a plain YAML scalar, which neither the filters' tests nor sanity noticed (ansible-lint did)."""
import glob
import os

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter import (fleet_views, nccl_network, router_role,
                                                                server_inputs, server_role, sglang_args, sglang_defaults,
                                                                sglang_nodes, sglang_router, sglang_secrets, systemd)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FILTERS = {}
for _module in (fleet_views, nccl_network, router_role, server_inputs, server_role, sglang_args, sglang_defaults,
                sglang_nodes, sglang_router, sglang_secrets, systemd):
    FILTERS.update(_module.FilterModule().filters())


def test_every_filter_module_is_listed_here():
    modules = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))}
    assert modules == {"fleet_views", "nccl_network", "router_role", "server_inputs", "server_role", "sglang_args",
                       "sglang_defaults", "sglang_nodes", "sglang_router", "sglang_secrets", "systemd"}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filter_doc_loads_and_names_the_filter(name):
    path = os.path.join(ROOT, "plugins", "filter", name + ".yml")
    assert os.path.isfile(path), "no documentation file for filter %s" % name
    with open(path, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    assert doc["DOCUMENTATION"]["name"] == name
    assert doc["DOCUMENTATION"]["short_description"]
    assert "EXAMPLES" in doc and "RETURN" in doc


def test_every_documentation_file_names_a_filter():
    """A filter removed (issue 39: its work moved into a module) takes its documentation file with it."""
    docs = {os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml"))}
    assert docs - set(FILTERS) == set()
