# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/plugin_utils/_text_safety.py: the one place an IPv6 literal is bracketed for a URL or SGLang's
host:port (the health URL of every playbook, --dist-init-addr of a multi-node server)."""
from __future__ import annotations

import pytest

from ansible_collections.gpuserve.sglang.plugins.plugin_utils._text_safety import unbracket, url_host


@pytest.mark.parametrize("given, bare, in_url", [
    ("::1", "::1", "[::1]"),
    ("[fd00::7]", "fd00::7", "[fd00::7]"),
    (" [fd00::7] ", "fd00::7", "[fd00::7]"),
    ("10.0.0.2", "10.0.0.2", "10.0.0.2"),
    ("node-0.example", "node-0.example", "node-0.example"),
    ("", "", ""),
    (None, "", ""),
    ("[", "[", "["),
])
def test_ipv6_is_bracketed_once(given, bare, in_url):
    assert unbracket(given) == bare
    assert url_host(given) == in_url
    assert url_host(url_host(given)) == in_url
