#!/usr/bin/env bash
# Make sure a Docker engine answers, and stop only what we started.
#   scripts/docker-engine.sh up    -> engine answers afterwards (installs docker.io when absent)
#   scripts/docker-engine.sh down  -> stops dockerd only if `up` started it
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="$ROOT/.cache/dockerd"
mkdir -p "$STATE"
PIDFILE="$STATE/dockerd.pid"

answers() { docker info >/dev/null 2>&1; }

case "${1:-up}" in
  up)
    if answers; then
      echo "docker-engine: an engine already answers; starting nothing"
      exit 0
    fi
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
      echo "docker-engine: installing docker.io and debootstrap from Debian"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq docker.io debootstrap >/dev/null
    fi
    command -v docker >/dev/null 2>&1 || { echo "docker-engine: no docker client after install" >&2; exit 1; }
    echo "docker-engine: starting dockerd (log: $STATE/dockerd.log)"
    setsid dockerd --pidfile "$STATE/dockerd.internal.pid" >"$STATE/dockerd.log" 2>&1 < /dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 60); do
      answers && { echo "docker-engine: dockerd answers (pid $(cat "$PIDFILE"))"; exit 0; }
      sleep 0.5
    done
    echo "docker-engine: dockerd did not answer within 30 s; last log lines:" >&2
    tail -20 "$STATE/dockerd.log" >&2
    exit 1
    ;;
  down)
    if [[ -f "$PIDFILE" ]]; then
      pid="$(cat "$PIDFILE")"
      if kill -0 "$pid" 2>/dev/null; then
        echo "docker-engine: stopping the dockerd we started (pid $pid)"
        kill "$pid"
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      fi
      rm -f "$PIDFILE"
    else
      echo "docker-engine: we started no dockerd; leaving the engine alone"
    fi
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
