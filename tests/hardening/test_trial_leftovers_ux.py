"""Leftovers of the fresh-user trial (session of 2026-12-01): a lone rank file, the NIC cap, --top, analyze, YAML."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from _hardkit import one_line_error, run

REPO = Path(__file__).resolve().parents[2]
CHAKRA = REPO / "sample_traces" / "chakra"  # ASTRA-sim's all_reduce.{0..3}.et (sample_traces/README.md)


def test_one_file_of_astra_sims_four_rank_set_is_refused_naming_the_node_the_group_and_the_command():
    # all_reduce.0.et holds one ALL_REDUCE (node 0, 1 MiB) without pg_name: ASTRA-sim runs it over the 4 NPUs
    # whose files lie beside it; alone it was replayed over 1 rank in 0 ns, without a word
    line = one_line_error(run("replay", CHAKRA / "all_reduce.0.et", "--hw", "dgx-a100"))
    assert line == (
        f"tracekit: error: {CHAKRA / 'all_reduce.0.et'}: rank 0: node 0: ALL_REDUCE without a process group spans "
        "every rank of the job, and the set expects 4 ranks (4 rank files all_reduce.0.et ... all_reduce.3.et lie "
        "beside it) but only 1 are given: a collective over 1 rank(s) takes 0 ns; pass the whole set: "
        f"tracekit replay {CHAKRA / 'all_reduce'}"
    )
    # unfolded, and two of the four files: the same check (the group of 2 is not the 4 ASTRA-sim ran)
    assert "node 0: ALL_REDUCE" in one_line_error(
        run("replay", CHAKRA / "all_reduce.0.et", "--hw", "dgx-a100", "--no-fold")
    )
    two = one_line_error(run("replay", CHAKRA / "all_reduce.0.et", CHAKRA / "all_reduce.1.et", "--hw", "dgx-a100"))
    assert "but only 2 are given: a collective over 2 rank(s) is timed as a smaller group" in two
    # a later rank alone names the whole set too (not only "the job has 3 ranks")
    assert one_line_error(run("replay", CHAKRA / "all_reduce.2.et", "--hw", "dgx-a100")).endswith(
        f"4 rank files of this set lie beside it (all_reduce.0.et ... all_reduce.3.et): pass the whole set: "
        f"tracekit replay {CHAKRA / 'all_reduce'}"
    )
    # the whole set, as the message says: ASTRA-sim's 1 MiB all-reduce over 4 ranks takes time
    whole = run("replay", CHAKRA / "all_reduce", "--hw", "dgx-a100", "--json")
    assert whole.exit_code == 0 and '"iteration_time_ns": 0' not in whole.stdout


def test_the_python_api_refuses_the_lone_file_too():
    from tracekit.errors import ReplayError
    from tracekit.io import read_traceset
    from tracekit.replayer import replay

    with pytest.raises(ReplayError, match=r"node 0: ALL_REDUCE .* expects 4 ranks") as info:
        replay(read_traceset(CHAKRA / "all_reduce.0.et"), "dgx-a100")
    assert (info.value.path, info.value.rank, info.value.node_id) == (str(CHAKRA / "all_reduce.0.et"), 0, 0)


def test_a_lone_file_without_siblings_replays_with_a_one_line_warning(tmp_path, caplog):
    from tracekit.io import read_traceset
    from tracekit.replayer import replay

    shutil.copy(CHAKRA / "all_reduce.0.et", tmp_path / "lonely.0.et")
    with caplog.at_level(logging.WARNING, logger="tracekit.replayer"):
        result = replay(read_traceset(tmp_path / "lonely.0.et"), "dgx-a100")
    assert result.iteration_time_ns == 0  # one rank: the all-reduce has nobody to talk to
    (record,) = [r for r in caplog.records if r.name == "tracekit.replayer"]
    assert record.getMessage() == (
        f"{tmp_path / 'lonely.0.et'}: rank 0: node 0: ALL_REDUCE without a process group spans every rank of the "
        "job, and the job has 1 rank: it takes 0 ns; if the job had more ranks, give every rank's file "
        "(<prefix>.<rank>.et)"
    )
