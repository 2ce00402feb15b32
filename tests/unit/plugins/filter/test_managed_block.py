# SPDX-License-Identifier: GPL-3.0-or-later
"""managed_block_state: the block's presence and flags, the text without it, and a real
ansible.builtin.blockinfile round trip (write, then take out) that gives the operator's file back byte for byte."""
from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter.managed_block import managed_block_state

from conftest import run_play

MARKER = "# {mark} gpuserve.sglang.nccl_tuning MANAGED BLOCK"
BEGIN = "# BEGIN gpuserve.sglang.nccl_tuning MANAGED BLOCK\n"
END = "# END gpuserve.sglang.nccl_tuning MANAGED BLOCK\n"


def _block(created, newline):
    return "%s# file-created-by-role: %s\n# newline-added-by-role: %s\nX = 1\n%s" % (
        BEGIN, "yes" if created else "no", "yes" if newline else "no", END)


def test_no_file_is_created_by_the_role():
    state = managed_block_state("", exists=False, marker=MARKER)
    assert state == {"present": False, "file_created": True, "newline_added": False, "text_without_block": "",
                     "restored_text": "", "remove_file": False}


def test_operator_file_without_a_trailing_newline_before_the_first_run():
    state = managed_block_state("import os", exists=True, marker=MARKER)
    assert not state["present"] and not state["file_created"] and state["newline_added"]


def test_flags_come_from_the_block_on_later_runs():
    text = "import os\n" + _block(created=False, newline=True)
    state = managed_block_state(text, marker=MARKER)
    assert state["present"] and not state["file_created"] and state["newline_added"]
    assert state["text_without_block"] == "import os\n"
    assert state["restored_text"] == "import os"
    assert not state["remove_file"]


def test_a_file_holding_only_the_roles_block_is_removed():
    state = managed_block_state(_block(created=True, newline=False), marker=MARKER)
    assert state["remove_file"] and state["restored_text"] == ""


def test_created_by_the_role_but_written_into_since_is_kept():
    state = managed_block_state(_block(created=True, newline=False) + "import site\n", marker=MARKER)
    assert state["present"] and state["file_created"] and not state["remove_file"]
    assert state["restored_text"] == "import site\n"


def test_operator_text_around_the_block_and_other_blocks_stay():
    other = "# BEGIN ANSIBLE MANAGED BLOCK\nY = 2\n# END ANSIBLE MANAGED BLOCK\n"
    text = "a = 1\n" + _block(False, False) + other + "b = 2\n"
    assert managed_block_state(text, marker=MARKER)["restored_text"] == "a = 1\n" + other + "b = 2\n"


def test_an_end_marker_at_the_end_of_the_file_without_newline():
    text = "a = 1\n" + _block(False, False)[:-1]
    state = managed_block_state(text, marker=MARKER)
    assert state["present"] and state["restored_text"] == "a = 1\n"


def test_a_marker_in_the_middle_of_a_line_is_not_a_block():
    text = "x = '%s%s'\n" % (BEGIN.strip(), END.strip())
    state = managed_block_state(text, marker=MARKER)
    assert not state["present"] and state["restored_text"] == text


@pytest.mark.parametrize("bad", [dict(text=3), dict(text="", marker="no mark here")])
def test_bad_input_refused(bad):
    with pytest.raises(AnsibleFilterError):
        managed_block_state(bad["text"], marker=bad.get("marker", MARKER))


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: State before
      ansible.builtin.set_fact:
        st: "{{ (lookup('ansible.builtin.file', path, rstrip=false) if exists else '')
                | gpuserve.sglang.managed_block_state(exists=exists, marker=marker) }}"
      vars:
        exists: "{{ path is exists }}"
    - name: Write the block as the role does
      ansible.builtin.blockinfile:
        path: "{{ path }}"
        marker: "{{ marker }}"
        block: |-
          # file-created-by-role: {{ 'yes' if st.file_created else 'no' }}
          # newline-added-by-role: {{ 'yes' if st.newline_added else 'no' }}
          X = 1
        insertafter: EOF
        create: true
        mode: "0644"
"""


def _blockinfile(tmp_path, path):
    rc, out = run_play(tmp_path, PLAY, [json.dumps({"path": str(path), "marker": MARKER})])
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize("original", ["import os\nprint('site')", "import os\n", None])
def test_real_blockinfile_round_trip(tmp_path, original):
    path = tmp_path / "sitecustomize.py"
    if original is not None:
        path.write_text(original)
    _blockinfile(tmp_path, path)
    _blockinfile(tmp_path, path)  # a second run changes nothing in the flags
    state = managed_block_state(path.read_text(), exists=True, marker=MARKER)
    assert state["present"]
    if original is None:
        assert state["remove_file"]
    else:
        assert not state["remove_file"] and state["restored_text"] == original
