# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in honours SGLang 0.5.9's --config (YAML keys become flags before the command line's), so the
server role's secrets file is exercised as the real server reads it; and it logs api_key as SGLang does."""
from __future__ import annotations

import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "standin"))
import sglang_standin as standin  # noqa: E402  pylint: disable=wrong-import-position


def test_config_keys_become_flags_before_the_command_line(tmp_path):
    path = tmp_path / "x.secrets.yaml"
    path.write_text("admin-api-key: 'it''s'\napi-key: molecule-secret-key\n")
    argv = standin.merge_config(["--tp", "8", "--config", str(path), "--port", "1"])
    assert argv == ["--admin-api-key", "it's", "--api-key", "molecule-secret-key", "--tp", "8", "--port", "1"]
    args = standin.build_parser().parse_known_args(argv)[0]
    assert args.api_key == "molecule-secret-key" and args.admin_api_key == "it's"
    line = standin.server_args_line(args)
    assert "api_key='molecule-secret-key'" in line and "admin_api_key=\"it's\"" in line


def test_command_line_wins_over_config(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text("api-key: from-file\n")
    argv = standin.merge_config(["--config", str(path), "--api-key", "from-cli"])
    assert standin.build_parser().parse_known_args(argv)[0].api_key == "from-cli"


@pytest.mark.parametrize("argv", [["--config", "/etc/x.env"], ["--config"], ["--config", "a.yaml", "--config", "b.yaml"]])
def test_config_refusals_as_sglang(argv):
    with pytest.raises(SystemExit):
        standin.merge_config(argv)


def test_no_config_no_change():
    assert standin.merge_config(["--tp", "2"]) == ["--tp", "2"]
