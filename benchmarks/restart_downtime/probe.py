# SPDX-License-Identifier: GPL-3.0-or-later
"""Ask the server for one token, one request after another, and write one JSON line per request: its send and
answer times (wall clock, the journal's clock), ok, the HTTP status or the error. Runs until STOP_FILE exists.
Usage: python probe.py URL KEY_FILE OUT_JSONL STOP_FILE [INTERVAL_S]"""
import json
import os
import sys
import time
import urllib.error
import urllib.request


def main(url, key_file, out, stop, interval=0.05):
    with open(key_file, encoding="utf-8") as f:
        key = f.read().strip()
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
    with open(out, "a", encoding="utf-8") as log:
        while not os.path.exists(stop):
            t0 = time.time()
            rec = {"t0": round(t0, 4)}
            try:
                req = urllib.request.Request(url.rstrip("/") + "/generate", data=body, headers=headers)
                with urllib.request.urlopen(req, timeout=5) as r:
                    r.read()
                    rec.update(ok=r.status == 200, status=r.status)
            except urllib.error.HTTPError as e:
                rec.update(ok=False, status=e.code)
            except Exception as e:  # refused, reset, timed out: the server is down
                rec.update(ok=False, error=type(e).__name__)
            rec["t1"] = round(time.time(), 4)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            time.sleep(max(0.0, interval - (rec["t1"] - t0)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]) if len(sys.argv) > 5 else 0.05)
