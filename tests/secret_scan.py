# SPDX-License-Identifier: GPL-3.0-or-later
"""Look for secrets in play output the way a reader of -vvv output or of AWX job events could find them.

A plain search misses a key that reaches the output encoded: a slurped environment file or /proc/<pid>/environ is
base64, a module result is JSON (a quote or a newline in a key comes out escaped), a URL carries it
percent-encoded, and these nest (JSON inside base64 inside JSON). Every layer is decoded, up to a few levels deep,
and every secret is searched in each, as is each secret's own base64 form at the three byte alignments (a key in the
middle of a longer base64 value that was cut short).

Used by molecule/prometheus (key_at_verbosity.yml) on the output of the server role at -vvv --diff:
    SECRET_SCAN_KEYS=$'key1\\nkey2' python3 tests/secret_scan.py < output.txt
Exit 0: none found, with what was decoded (so that a run that read nothing is visible); exit 1: where each was
found, the secret masked; exit 2: no secret given. Test code only: the collection does not use it.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import re
import sys
from urllib.parse import unquote

_B64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_DEPTH = 4


def _b64_values(text):
    for match in _B64.finditer(text):
        token = match.group(0)
        for alphabet in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                raw = alphabet(token + "=" * (-len(token) % 4))
            except (binascii.Error, ValueError):
                continue
            decoded = raw.decode("utf-8", errors="replace")
            # random text decodes too; keep what is mostly printable
            if decoded and sum(ch.isprintable() or ch in "\n\t\0" for ch in decoded) >= 0.8 * len(decoded):
                yield decoded
                break


def _json_values(text):
    for match in _JSON_STRING.finditer(text):
        literal = match.group(0)
        if "\\" not in literal:
            continue
        try:
            yield json.loads(literal)
        except ValueError:
            continue


def b64_cores(secret):
    """The part of base64(prefix + secret + suffix) that the secret alone decides, for the three alignments."""
    data = secret.encode("utf-8")
    cores = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode("ascii")
        start = -(-4 * shift // 3)
        end = (4 * (shift + len(data))) // 3
        core = encoded[start:end]
        if len(core) >= 8:
            cores.append(core)
            cores.append(core.replace("+", "-").replace("/", "_"))
    return cores


def layers(text):
    """(how it was reached, text) for the text and everything decoded from it, breadth first."""
    seen = {text}
    found = [("output", text)]
    queue = [("output", text, 0)]
    while queue:
        path, current, depth = queue.pop(0)
        if depth >= _DEPTH:
            continue
        derived = [("base64", value) for value in _b64_values(current)]
        derived += [("json", value) for value in _json_values(current)]
        if "%" in current:
            derived.append(("url", unquote(current)))
        for kind, value in derived:
            if value in seen:
                continue
            seen.add(value)
            found.append((path + " > " + kind, value))
            queue.append((path + " > " + kind, value, depth + 1))
    return found


def scan(text, secrets):
    """[(secret index, form, excerpt with the secret masked)] for every secret found; [] when none is."""
    secrets = [s for s in secrets if s]
    hits = []
    all_layers = layers(text)
    for index, secret in enumerate(secrets):
        for path, value in all_layers:
            at = value.find(secret)
            if at >= 0:
                excerpt = value[max(0, at - 40):at + len(secret) + 40].replace(secret, "<SECRET %d>" % index)
                hits.append((index, path, excerpt))
        for core in b64_cores(secret):
            at = text.find(core)
            if at >= 0:
                hits.append((index, "output > base64 of the secret", text[max(0, at - 20):at + 20]
                             .replace(core, "<BASE64 OF SECRET %d>" % index)))
    return hits, len(all_layers) - 1


def main():
    secrets = [s for s in os.environ.get("SECRET_SCAN_KEYS", "").split("\n") if s]
    if not secrets:
        print("secret_scan: no secret given (SECRET_SCAN_KEYS)")
        return 2
    text = sys.stdin.read()
    hits, decoded = scan(text, secrets)
    for index, path, excerpt in hits:
        print("secret %d found in %s: %r" % (index, path, excerpt))
    if hits:
        return 1
    print("secret_scan: %d secret(s) in none of %d bytes of output and %d values decoded from it"
          % (len(secrets), len(text), decoded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
