"""Faults left by the last session's trial of issue 32, each reproduced with the trial's input.

Each test asserts the right value or the one error line (file, rank, node, bad value; options with their dashes)
and that no output file was written.
"""

from __future__ import annotations

import json

import pytest
from _hardkit import one_line_error, ring_job, run


@pytest.mark.parametrize("command", [("replay", "--hw", "dgx-h100"), ("validate",), ("info",)])
def test_a_comm_group_id_given_twice_is_refused_naming_the_file_and_the_id(tmp_path, command):
    """`{"1": [0, 1], "1": [2, 3]}` was read as `{"1": [2, 3]}` (JSON's last-wins)."""
    prefix = ring_job(tmp_path, 4)
    groups = tmp_path / "groups.json"
    groups.write_text('{"1": [0, 1], "2": [0, 1, 2, 3], "1": [2, 3]}')
    out = tmp_path / "r.json"
    extra = ("-o", out) if command[0] == "replay" else ()
    res = run(*command[:1], prefix, *command[1:], "--comm-groups", groups, *extra)
    assert one_line_error(res) == (
        f"tracekit: error: {groups}: comm-group id '1' appears twice in the file; give each group once"
    )
    assert not out.exists()
