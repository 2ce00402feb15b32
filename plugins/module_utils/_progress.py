# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Phase changes of sglang_service written to the host's journal under the module's own identifier.

Follow them on the host with ``journalctl -f -t gpuserve-sglang-service``. Uses journald's native socket
(``/run/systemd/journal/socket``, standard library only); when it is missing nothing is written and nothing fails.
"""

from __future__ import annotations

import socket
import struct

IDENTIFIER = "gpuserve-sglang-service"
JOURNAL_SOCKET = "/run/systemd/journal/socket"


def follow_command(identifier=IDENTIFIER):
    return "journalctl -f -t %s" % identifier


class JournalProgress(object):
    def __init__(self, unit, identifier=IDENTIFIER, path=JOURNAL_SOCKET):
        self.unit = unit
        self.identifier = identifier
        self.path = path
        self.sent = []

    def __call__(self, message, priority=6):
        text = "%s: %s" % (self.unit, message)
        self.sent.append(text)
        fields = [("SYSLOG_IDENTIFIER", self.identifier), ("PRIORITY", str(priority)),
                  ("GPUSERVE_UNIT", self.unit), ("MESSAGE", text)]
        payload = b""
        for key, value in fields:
            data = value.encode("utf-8", "replace")
            if b"\n" in data:
                payload += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
            else:
                payload += key.encode() + b"=" + data + b"\n"
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.sendto(payload, self.path)
            finally:
                sock.close()
        except (OSError, IOError):
            pass
