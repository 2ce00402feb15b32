# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the checkout importable as ansible_collections.gpuserve.sglang for unit tests."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpuserve", "sglang")
if not os.path.exists(LINK):
    subprocess.check_call([os.path.join(ROOT, "scripts", "collection-link.sh")])
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
