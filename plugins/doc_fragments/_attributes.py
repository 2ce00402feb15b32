# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
"""The modules' C(attributes) block, written once (community.docker's doc_fragments/_attributes.py style).

Every module extends the standard fragment; the read-only ones add INFO_MODULE:

    extends_documentation_fragment:
      - gpuserve.sglang._attributes
      - gpuserve.sglang._attributes.info_module

Ansible merges a module's own C(attributes) over these key by key, so a module adds C(details) where its
behaviour needs saying.
"""

from __future__ import annotations


class ModuleDocFragment(object):

    # Standard fragment: what each attribute means, and the platform every module of this collection runs on.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
    details:
      - Linux hosts.
"""

    # With the standard fragment: a module that only reads the host.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - Read-only; runs the same way in check mode.
  diff_mode:
    support: none
    details:
      - Reports only; there is nothing to diff.
"""

    # With the standard fragment: a module with an action plugin of the same name (part of its work is done on the
    # controller, e.g. reading what only the controller can see).
    ACTION_PLUGIN = r"""
options: {}
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
"""
