# shellcheck shell=bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The real-SGLang lane's machine setup, shared by tests/gpu/real_server.sh and benchmarks/restart_downtime/run.sh:
#   real_setup   ansible-core from $CARRY/wheels into /tmp/ans; Debian 12's systemd 252 ($CARRY/debs) started as
#                PID 1 of its own PID/mount/cgroup namespaces; SGLang 0.5.17 ($CARRY/site.tar.xz) unpacked into
#                $SITE and put first on the image's torch venv's path (a .pth); CUDA_HOME found; $STATE/env written
#                (SD: systemd's PID, PY0: the interpreter, CH: CUDA_HOME, SMI_DIR: nvidia-smi's folder).
# Needs CARRY, SITE, STATE, REPO and the lib.sh helpers (bad). Returns 1 when systemd or CUDA_HOME is missing.
real_setup() {
  PY0=$(command -v python3)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ans "$CARRY"/wheels/*.whl \
    || bad "ansible-core wheels"
  # systemd 252 (Debian 12), staged and copied into the merged /usr: only the libraries the machine lacks
  S=/tmp/sdstage; rm -rf $S; mkdir -p $S
  for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" $S; done
  L=/usr/lib/x86_64-linux-gnu
  for lib in "$S"/lib/x86_64-linux-gnu/*.so* "$S"/usr/lib/x86_64-linux-gnu/*.so*; do [ -e "$L/$(basename "$lib")" ] || cp -a "$lib" $L/; done
  mkdir -p /usr/lib/systemd $L/systemd /etc/systemd/system /var/log/journal
  cp -a $S/lib/systemd/. /usr/lib/systemd/; cp -a $S/usr/lib/x86_64-linux-gnu/systemd/. $L/systemd/ 2>/dev/null
  [ -d $S/usr/lib/systemd ] && cp -an $S/usr/lib/systemd/. /usr/lib/systemd/
  cp -a $S/bin/. /usr/bin/ 2>/dev/null; cp -an $S/usr/bin/. /usr/bin/ 2>/dev/null
  cp -an $S/etc/systemd/. /etc/systemd/ 2>/dev/null; ldconfig
  [ -s /etc/machine-id ] || systemd-machine-id-setup >/dev/null 2>&1
  export container=other
  setsid unshare --pid --fork --mount --cgroup --propagation private bash -c 'mount -t proc proc /proc; mount -t tmpfs tmpfs /run; umount /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 cgroup2 /sys/fs/cgroup; exec /usr/lib/systemd/systemd --system' \
    > /tmp/sd-pid1.log 2>&1 < /dev/null &
  # SGLang 0.5.17 and its start's packages, first on the torch venv's path (its transformers must win)
  mkdir -p "$SITE"
  "$PY0" -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='fully_trusted')" "$CARRY/site.tar.xz" "$SITE" \
    || bad "unpack SGLang"
  chmod -R a+rX "$SITE"
  SP=$("$PY0" -c 'import site; print(site.getsitepackages()[0])')
  echo "import sys; sys.path.insert(0, '$SITE')" > "$SP/00-gpuserve-sglang-0517.pth"
  # CUDA_HOME with bin/nvcc AND lib64/libcudart.so (SGLang's JIT links -lcudart)
  CH=""; for c in "${CUDA_HOME:-}" /usr/local/cuda; do [ -n "$c" ] && [ -x "$c/bin/nvcc" ] && [ -e "$c/lib64/libcudart.so" ] && { CH=$c; break; }; done
  for _ in $(seq 1 30); do
    SD=$(ps -eo pid,args | awk '$2=="/usr/lib/systemd/systemd" && $3=="--system" {print $1}' | head -1)
    [ -n "$SD" ] && nsenter -t "$SD" -a systemctl is-system-running 2>/dev/null | grep -qE 'running|degraded' && break
    sleep 1
  done
  {
    echo "SD=$SD"; echo "PY0=$PY0"; echo "CH=$CH"; echo "SMI_DIR=$(dirname "$(command -v nvidia-smi)")"
  } > "$STATE/env"
  echo "systemd pid ${SD:-none}: $(nsenter -t "${SD:-1}" -a systemctl is-system-running 2>&1); CUDA_HOME=${CH:-none}"
  "$PY0" -c 'import sglang, sgl_kernel, transformers; print("sglang", sglang.__version__, "transformers", transformers.__version__)' \
    || bad "import sglang"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  if [ -z "${SD:-}" ] || [ -z "$CH" ]; then tail -20 /tmp/sd-pid1.log; return 1; fi
}

# real_role_playbook FILE: the server role on localhost; whatever happens, the sglang_server module's answer (the
# role registers it as sglang_server) is kept as JSON in the file the run names with -e result_file=PATH, so the
# checks read what the module returns, not what the callback prints at default verbosity.
real_role_playbook() {
  cat > "$1" <<'YAML'
- name: The server role on this GPU machine
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The server role, the module's answer kept
      block:
        - name: The server role
          ansible.builtin.import_role:
            name: gpuserve.sglang.server
      always:
        - name: Keep the sglang_server module's answer
          ansible.builtin.copy:
            content: "{{ sglang_server | default({}) | to_nice_json }}"
            dest: "{{ result_file }}"
            mode: "0600"
          check_mode: false   # kept in --check too (the benchmark reads the predicted downtime from it)
YAML
}

# real_result FILE KEY.PATH: one value of a kept module answer, as JSON ("null" when absent or unreadable).
real_result() {
  "${PY0:-python3}" - "$1" "$2" <<'PY'
import json, sys
try:
    value = json.load(open(sys.argv[1]))
    for key in sys.argv[2].split("."):
        value = value.get(key) if isinstance(value, dict) else None
except (OSError, ValueError):
    value = None
print(json.dumps(value))
PY
}
