# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang server's on-host life in one Python owner (issue 39), used by the module gpuserve.sglang.sglang_server.

One concern per file:

- ``desired``: what should be on the host (the files to land, the directories, the files the server reads);
- ``onhost``: what is there (each file's state and checksum, the unit's state, the last-good manifest, an open
  transaction or restore);
- ``plan``: the actions, a pure function of the two (testable without a host);
- ``txn``: the write-ahead record of a change, written before its first write, so that a killed run is finished
  (restored and verified) by the next call;
- ``land``: the files written atomically, the unit checked by ``systemd-analyze verify`` before it lands;
- ``claim``: what a run may claim (the files the verified invocation read against what it rendered);
- ``machine``: the state machine (compare, keep, land, restart, verify, gates, commit or restore), with every
  collaborator injected.

No Ansible import here: the module file builds the collaborators and calls ``machine.ServerLifecycle``.
"""
