# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The AnsibleModule of every module of the collection: it never writes its options to the host's journal.

AnsibleModule logs every option not marked ``no_log`` as "Invoked with ..." (journald, else syslog), a dict option
as its repr, which the no_log values of its sub-options do not match (an HF_TOKEN in the environment file's
content inside ``env``). ``AnsibleModule(no_log=True)`` does not stop it: the task's own no_log, which Ansible
passes to every module as ``_ansible_no_log`` (False unless the task sets ``no_log``), overrides the constructor's
(``_set_internal_properties``, ansible-core 2.19-2.22). The secret hunt of molecule/install found the token in the
journal this way (issue 48). ``QuietModule`` logs no invocation, whatever the task says; everything else is
AnsibleModule's (``no_log`` options still masked in results, the core's masking API where it has one)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def _no_invocation_log(self):
    """No "Invoked with ..." line: the options can carry secrets in forms no_log does not match."""
    return None


class QuietModule(AnsibleModule):
    """AnsibleModule without its invocation line in the host's journal."""

    _log_invocation = _no_invocation_log
