# SPDX-License-Identifier: GPL-3.0-or-later
"""Quoting for systemd (plugins/filter/systemd.py): ExecStart, Environment=, EnvironmentFile, unit values."""
from __future__ import annotations

import shlex

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter import sglang_args as a
from ansible_collections.gpuserve.sglang.plugins.filter import systemd as f

PREFIX = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
KIMI = {"tp": 8, "speculative-algorithm": "EAGLE3", "enable-hierarchical-cache": True, "hicache-ratio": 4.0}


def systemd_words(line):
    """Read an ExecStart line back (the subset sglang_cmdline writes: double quotes, \\\\ \\" escapes, $$, %%)."""
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line, posix=True)]


# ---- sglang_argv / sglang_cmdline --------------------------------------------------------------------------------

def test_cmdline_plain_words_stay_unquoted():
    line = f.sglang_cmdline({"tp": 8, "hicache-ratio": 4.0, "enable-hierarchical-cache": True}, prefix=PREFIX)
    assert line == ("/opt/sglang/venv/bin/python -m sglang.launch_server --tp 8 --hicache-ratio 4.0 "
                    "--enable-hierarchical-cache")


@pytest.mark.parametrize("value, quoted", [
    ("/models/Kimi K2.5", '"/models/Kimi K2.5"'),
    ("price$HOME", '"price$$HOME"'),
    ("100%", '"100%%"'),
    ("%n", '"%%n"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("", '""'),
    (";", '";"'),
    ("it's", '"it\'s"'),
])
def test_cmdline_quotes_for_systemd(value, quoted):
    line = f.sglang_cmdline({"served-model-name": value})
    assert line == "--served-model-name " + quoted


def test_cmdline_round_trips_every_word():
    args = {"model-path": "/models/Kimi K2.5 $x 100%", "served-model-name": 'a "b" \\c', "tp": 8,
            "json-model-override-args": {"rope scaling": {"factor": 2.0}}, "enable-metrics": True}
    line = f.sglang_cmdline(args, prefix=PREFIX)
    assert systemd_words(line) == PREFIX + a.sglang_argv(args)


def test_cmdline_takes_a_word_list():
    assert f.sglang_cmdline(["--x", "a b", 3]) == '--x "a b" 3'


def test_cmdline_refuses_scalar():
    with pytest.raises(AnsibleFilterError):
        f.sglang_cmdline("--tp 8")


def test_no_unescaped_dollar_or_percent_left():
    line = f.sglang_cmdline({"x": "$A ${B} %i %% $$"})
    stripped = line.replace("$$", "").replace("%%", "")
    assert "$" not in stripped and "%" not in stripped


# ---- env file and masking ----------------------------------------------------------------------------------------

def test_envfile_lines_sorted_and_escaped():
    text = f.sglang_envfile({"B": 'x "y" \\z', "A": True, "C": None, "D": 4})
    assert text == 'A="true"\nB="x \\"y\\" \\\\z"\nD="4"\n'
    assert f.sglang_envfile({}) == ""


@pytest.mark.parametrize("bad", [{"A B": "1"}, {"A": "two\nlines"}])
def test_envfile_refuses(bad):
    with pytest.raises(AnsibleFilterError):
        f.sglang_envfile(bad)


# ---- injection (issue 14) ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["x\n", "a\tb", "a\rb", "\x00", "\x1b[31m", "\x7f", "\x85", "\u2028"])
def test_cmdline_refuses_control_characters(value):
    with pytest.raises(AnsibleFilterError, match="control characters"):
        f.sglang_cmdline({"served-model-name": value})


def test_lora_paths_newline_cannot_add_a_directive():
    """The issue's reproducer: a word ending in a newline passed the 'safe word' re.match('^...$')."""
    with pytest.raises(AnsibleFilterError):
        f.sglang_cmdline({"lora-paths": ["x\n", "ExecStartPre=+/bin/sh", "/srv/evil.sh"]}, prefix=PREFIX)


def test_safe_word_is_a_full_match():
    # a safe word followed by anything else is quoted, never left bare
    assert f.systemd_quote("abc def") == '"abc def"'
    assert f.systemd_quote("abc;") == '"abc;"'


@pytest.mark.parametrize("env", [{"A": "x\nB=2"}, {"A\n": "1"}, {"A": "\u2029"}])
def test_unit_environment_and_envfile_refuse(env):
    with pytest.raises(AnsibleFilterError):
        f.sglang_unit_environment(env)
    with pytest.raises(AnsibleFilterError):
        f.sglang_envfile(env)


def test_unit_value_doubles_percent_and_refuses_newlines():
    assert f.sglang_unit_value("SGLang 100% %n") == "SGLang 100%% %%n"
    with pytest.raises(AnsibleFilterError, match="sglang_unit_description"):
        f.sglang_unit_value("x\nExecStartPre=+/bin/sh", "sglang_unit_description")


def test_unit_extra_repeats_directives_in_order():
    text = f.sglang_unit_extra({"Nice": -5, "DeviceAllow": ["/dev/nvidia0 rw", "/dev/nvidia1 rw"], "ReadWritePaths": ""})
    assert text.split("\n") == ["Nice=-5", "DeviceAllow=/dev/nvidia0 rw", "DeviceAllow=/dev/nvidia1 rw",
                                "ReadWritePaths="]


@pytest.mark.parametrize("extra", [{"Nice": "1\nExecStartPre=+/bin/sh"}, {"Exec Start": "x"}, {"nice": 1},
                                   {"Nice\n": 1}, {"Nice": {"a": 1}}, {"Nice": [None]}, ["Nice=1"]])
def test_unit_extra_refuses(extra):
    with pytest.raises(AnsibleFilterError):
        f.sglang_unit_extra(extra)


def test_filter_modules_keep_the_filter_names():
    """The split (issue 11) keeps every FQCN gpuserve.sglang.<filter> the callers use."""
    from ansible_collections.gpuserve.sglang.plugins.filter import sglang_secrets, server_inputs
    names = set()
    for module in (a, f, sglang_secrets, server_inputs):
        names |= set(module.FilterModule().filters())
    assert {"sglang_args_merge", "sglang_cmdline", "sglang_argv", "sglang_args_problems", "sglang_envfile",
            "sglang_mask_env", "sglang_unit_environment", "sglang_unit_value", "sglang_unit_extra",
            "sglang_input_problems", "sglang_release_args", "sglang_pd_server_args", "sglang_mask"} == names
