# SPDX-License-Identifier: GPL-3.0-or-later
"""systemctl show / list-jobs parsing, on output captured from systemd 252 (Debian 12)."""
import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _systemd as sd

# `systemctl show standin-a --property=...` on systemd 252 while a restart drains (captured in the test host).
SHOW_DEACTIVATING = """\
Id=sglang-kimi.service
Restart=on-failure
RestartUSec=10s
MainPID=78
Result=success
NRestarts=0
ExecMainCode=0
ExecMainStatus=0
ExecStart={ path=/opt/sglang/venv/bin/python ; argv[]=/opt/sglang/venv/bin/python -m sglang.launch_server \
--model-path /models/Kimi-K2.5 --tp 8 --enable-hierarchical-cache --hicache-ratio 2 --port 30000 ; \
ignore_errors=no ; start_time=[Sun 2026-11-29 17:54:34 UTC] ; stop_time=[n/a] ; pid=78 ; code=(null) ; status=0/0 }
LoadState=loaded
ActiveState=deactivating
SubState=stop-sigterm
Job=168
InvocationID=875ec1d84ac54aac96253b0bb1d1ab93
"""

SHOW_NOT_FOUND = """\
Id=nope.service
LoadState=not-found
ActiveState=inactive
SubState=dead
MainPID=0
InvocationID=
NRestarts=0
Result=success
ExecStart=
Job=
"""


def test_parse_show_reads_every_property():
    st = sd.UnitState(sd.parse_show(SHOW_DEACTIVATING))
    assert st.active_state == "deactivating" and st.sub_state == "stop-sigterm"
    assert st.stopping and not st.running and not st.down
    assert st.main_pid == 78
    assert st.job_id == 168
    assert st.invocation_id == "875ec1d84ac54aac96253b0bb1d1ab93"
    assert st.n_restarts == 0
    assert st.restart == "on-failure" and st.restart_sec == 10.0
    assert st.exec_start[:3] == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    assert "job 168 queued" in st.describe()


def test_not_found_unit():
    st = sd.UnitState(sd.parse_show(SHOW_NOT_FOUND))
    assert st.load_state == "not-found" and st.down and st.job_id == 0 and st.invocation_id == ""


@pytest.mark.parametrize("argv, expected", [
    (["python", "-m", "sglang.launch_server", "--tp", "8", "--enable-hierarchical-cache"], {"hicache": True, "tp": 8}),
    (["python", "-m", "sglang_standin", "--tp-size=4"], {"hicache": False, "tp": 4}),
    (["python", "-m", "sglang.launch_server", "--tensor-parallel-size", "2"], {"hicache": False, "tp": 2}),
    (["/opt/sglang/bin/run.sh"], {"hicache": False, "tp": None}),
    (["python", "--tp"], {"hicache": False, "tp": None}),
])
def test_exec_start_facts(argv, expected):
    facts = sd.exec_start_facts(argv)
    assert dict((key, facts[key]) for key in expected) == expected


def test_exec_start_facts_from_real_show_output():
    st = sd.UnitState(sd.parse_show(SHOW_DEACTIVATING))
    facts = sd.exec_start_facts(st.exec_start)
    assert facts["hicache"] is True and facts["tp"] == 8


@pytest.mark.parametrize("text, seconds", [
    ("100ms", 0.1), ("10s", 10.0), ("1min 30s", 90.0), ("2.500s", 2.5), ("infinity", None), ("", None),
])
def test_parse_timespan(text, seconds):
    assert sd.parse_timespan(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize("name, unit", [
    ("sglang-kimi", "sglang-kimi.service"), ("sglang-kimi.service", "sglang-kimi.service"),
    ("sglang@a.service", "sglang@a.service"),
])
def test_unit_name(name, unit):
    assert sd.unit_name(name) == unit


@pytest.mark.parametrize("bad", ["", "  ", "a b", "../x"])
def test_unit_name_rejects(bad):
    with pytest.raises(ValueError):
        sd.unit_name(bad)


class Recorder(object):
    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, **_kw):
        self.calls.append(argv)
        return self.answers.get(argv[1], (0, "", ""))


def test_systemctl_show_and_queue_without_blocking():
    run = Recorder({"show": (0, SHOW_DEACTIVATING, ""),
                    "list-jobs": (0, "168 sglang-kimi.service restart running\n", "")})
    ctl = sd.Systemctl(run, "/usr/bin/systemctl")
    st = ctl.show("sglang-kimi.service")
    assert run.calls[0][:3] == ["/usr/bin/systemctl", "show", "sglang-kimi.service"]
    assert "InvocationID" in run.calls[0][3] and "NRestarts" in run.calls[0][3]
    assert ctl.job_type("sglang-kimi.service", st.job_id) == "restart"
    assert ctl.job_type("sglang-kimi.service", 999) == ""
    ctl.restart_no_block("sglang-kimi.service")
    assert run.calls[-1] == ["/usr/bin/systemctl", "restart", "--no-block", "sglang-kimi.service"]
    assert ctl.commands == ["/usr/bin/systemctl restart --no-block sglang-kimi.service"]


def test_systemctl_errors_are_reported():
    ctl = sd.Systemctl(Recorder({"show": (1, "", "Failed to connect to bus"), "restart": (5, "", "denied")}))
    with pytest.raises(sd.SystemdError, match="Failed to connect to bus"):
        ctl.show("x.service")
    with pytest.raises(sd.SystemdError, match="denied"):
        ctl.restart_no_block("x.service")
