# SPDX-License-Identifier: GPL-3.0-or-later
"""One identity per worker (issue 23): every name a router may list a worker by maps back to its host."""
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_router import sglang_worker_aliases, sglang_worker_urls


HOSTVARS = {
    "gpu-1": {"ansible_host": "10.0.0.1", "sglang_host": "0.0.0.0", "sglang_port": 30001,
              "ansible_facts": {"fqdn": "gpu-1.dc.example", "default_ipv4": {"address": "10.0.0.1"},
                                "default_ipv6": {"address": "fd00::1"}}},
    "gpu-2": {"sglang_router_worker_address": "gpu-2.internal", "sglang_host": "192.168.1.2"},
    "gpu-3": {"ansible_host": "10.0.0.3\nExecStartPre=/bin/sh", "sglang_host": "127.0.0.1"},
}


def test_every_name_on_the_same_port_primary_first():
    aliases = sglang_worker_aliases(["gpu-1", "gpu-2"], HOSTVARS)
    assert list(aliases) == sglang_worker_urls(["gpu-1", "gpu-2"], HOSTVARS)
    assert aliases["http://gpu-1:30001"] == ["http://10.0.0.1:30001", "http://gpu-1.dc.example:30001",
                                             "http://[fd00::1]:30001"]
    # the address the router registers it by is the primary; the inventory name and sglang_host are aliases
    assert aliases["http://gpu-2.internal:30000"] == ["http://gpu-2:30000", "http://192.168.1.2:30000"]


def test_loopback_wildcards_and_hostile_names_are_no_alias():
    aliases = sglang_worker_aliases(["gpu-3"], HOSTVARS)
    assert aliases == {"http://gpu-3:30000": []}


# One server over several hosts (issue 25): only node 0 serves the API, so the server is one worker, node 0's URL.
NODES = {
    "gpu-a1": {"sglang_server_nodes": ["gpu-a1", "gpu-a2"], "ansible_host": "10.0.0.11", "sglang_host": "0.0.0.0"},
    "gpu-a2": {"sglang_server_nodes": ["gpu-a1", "gpu-a2"], "ansible_host": "10.0.0.12", "sglang_host": "0.0.0.0"},
    "gpu-b1": {"sglang_host": "0.0.0.0"},
}


def test_a_server_over_several_hosts_is_one_worker_node_0():
    from ansible_collections.gpuserve.sglang.plugins.filter.sglang_router import sglang_worker_loopback
    # the fleet counts servers: two servers, not three hosts (max_unavailable, "never the last healthy one")
    assert sglang_worker_urls(["gpu-a1", "gpu-a2", "gpu-b1"], NODES) == ["http://gpu-a1:30000", "http://gpu-b1:30000"]
    # node 1 stands for its server: a batch of node 1 alone, or both nodes, drains node 0's URL once
    assert sglang_worker_urls(["gpu-a2"], NODES) == ["http://gpu-a1:30000"]
    assert sglang_worker_urls(["gpu-a1", "gpu-a2"], NODES) == ["http://gpu-a1:30000"]
    # node 0's names only; node 1's address is no alias of the server (nothing listens there for the router)
    assert sglang_worker_aliases(["gpu-a1", "gpu-a2"], NODES) == {"http://gpu-a1:30000": ["http://10.0.0.11:30000"]}
    assert sglang_worker_aliases(["gpu-a2"], NODES) == {"http://gpu-a1:30000": ["http://10.0.0.11:30000"]}
    # node 1 listening on loopback is not a worker that routers cannot reach: it is no worker at all
    assert sglang_worker_loopback(["gpu-a2"], dict(NODES, **{"gpu-a2": dict(NODES["gpu-a2"], sglang_host="127.0.0.1")})) == []
