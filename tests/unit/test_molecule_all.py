# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/molecule-all.sh: how many scenarios run at once. MOLECULE_JOBS at first, MOLECULE_JOBS_LATER from the moment
the file MOLECULE_JOBS_LATER_WHEN exists (scripts/test.sh: once its static lane has ended, issue 20). The script runs
in a copy of the layout it reads (molecule/ORDER, molecule/<scenario>/molecule.yml, molecule/IMAGES) with a fake
`molecule` that records when each scenario ran and a fake image script."""
from __future__ import annotations

import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# `molecule test -s NAME`: records start and end, holds for HOLD_<NAME> seconds (default 1); scenario `first`
# creates the WHEN file after half a second, as the static lane's end would
FAKE_MOLECULE = """#!/bin/sh
name="$3"
echo "start $name" >> "$EVENTS"
if [ "$name" = first ]; then sleep 0.5; touch "$MOLECULE_JOBS_LATER_WHEN"; echo "later" >> "$EVENTS"; fi
if [ "$name" = cpu ]; then   # burns CPU in a child, and reports its hosts' CPU as scripts/molecule-hosts.py does
  sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i + 1)); done'
  printf '0.0\\n1.5\\n' >> "$GPUSERVE_HOST_CPU_FILE"
fi
eval "hold=\\${HOLD_$name:-1}"
sleep "$hold"
echo "end $name" >> "$EVENTS"
"""


def _layout(tmp_path, scenarios):
    (tmp_path / "scripts").mkdir()
    for name in ("molecule-all.sh", "stamp-lines.py"):
        shutil.copy(os.path.join(ROOT, "scripts", name), tmp_path / "scripts" / name)
    images = tmp_path / "scripts" / "test-images.sh"
    images.write_text("#!/bin/sh\nmkdir -p \"$(dirname \"$0\")/../.cache\"\n"
                      "printf 'host=fake/host:1\\ndebian13=fake/host13:1\\n' > \"$(dirname \"$0\")/../.cache/test-images.env\"\n")
    images.chmod(0o755)
    (tmp_path / "molecule").mkdir()
    (tmp_path / "molecule" / "ORDER").write_text("\n".join(scenarios) + "\n")
    (tmp_path / "molecule" / "IMAGES").write_text("")
    for name in scenarios:
        (tmp_path / "molecule" / name).mkdir()
        (tmp_path / "molecule" / name / "molecule.yml").write_text("---\n")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    fake = tmp_path / ".venv" / "bin" / "molecule"
    fake.write_text(FAKE_MOLECULE)
    fake.chmod(0o755)


def _most_at_once(events):
    running, most = 0, 0
    for event in events:
        if event.startswith("start "):
            running += 1
            most = max(most, running)
        elif event.startswith("end "):
            running -= 1
    return most


def test_more_scenarios_at_once_from_the_moment_the_file_exists(tmp_path):
    scenarios = ["first", "b", "c", "d", "e"]
    _layout(tmp_path, scenarios)
    events = tmp_path / "events"
    env = dict(os.environ, EVENTS=str(events), MOLECULE_JOBS="1", MOLECULE_JOBS_LATER="3",
               MOLECULE_JOBS_LATER_WHEN=str(tmp_path / "static.done"), HOLD_first="4", GPUSERVE_TEST_CTL_CACHE="x")
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "molecule-all.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = events.read_text().splitlines()
    later = lines.index("later")
    # one at a time before the file: nothing else started while `first` ran alone
    assert lines[:later] == ["start first"]
    # from the file on, two more start while `first` still runs (3 at once), never a fourth
    assert lines.index("start b") < lines.index("end first") and lines.index("start c") < lines.index("end first")
    assert _most_at_once(lines) == 3
    assert sorted(line for line in lines if line.startswith("end ")) == sorted("end " + s for s in scenarios)
    assert "5 scenarios in" in proc.stdout and "1 at once, 3 once" in proc.stdout


def test_without_the_file_the_first_number_holds(tmp_path):
    scenarios = ["b", "c", "d", "e"]
    _layout(tmp_path, scenarios)
    events = tmp_path / "events"
    env = dict(os.environ, EVENTS=str(events), MOLECULE_JOBS="2", MOLECULE_JOBS_LATER="4",
               MOLECULE_JOBS_LATER_WHEN=str(tmp_path / "never"), GPUSERVE_TEST_CTL_CACHE="x")
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "molecule-all.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _most_at_once(events.read_text().splitlines()) == 2


def test_each_scenarios_cpu_is_recorded_controller_and_hosts(tmp_path):
    _layout(tmp_path, ["cpu"])
    env = dict(os.environ, EVENTS=str(tmp_path / "events"), MOLECULE_JOBS="1", HOLD_cpu="0",
               GPUSERVE_TEST_CTL_CACHE="x")
    proc = subprocess.run(["bash", str(tmp_path / "scripts" / "molecule-all.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rc, secs, controller, hosts = (tmp_path / ".cache" / "molecule-logs" / "cpu.result").read_text().split()
    assert rc == "0" and int(secs) >= 0
    assert float(controller) >= 0.1     # the child's busy loop, counted through molecule's process
    assert float(hosts) == 1.5          # the lines molecule-hosts.py added, summed
    assert "CPU: controller %s s, hosts 1.5 s" % controller in proc.stdout
