"""Outputs never destroy inputs, never mix with stale rank files, and never exist half-written."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import TracekitError
from tracekit.io import TraceSetWriter, encode_trace, write_traceset
from tracekit.model import ExecutionTrace, Node
from tracekit.sets.traceset import TraceSet


@pytest.fixture()
def job(tmp_path, samples_dir):
    for f in (samples_dir / "chakra").glob("all_reduce.*.et"):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / "all_reduce"


@pytest.mark.parametrize(
    "args",
    [
        ["dump", "{d}/all_reduce.0.et", "-o", "{d}/all_reduce.0.et"],
        ["replay", "{d}/all_reduce", "--hw", "dgx-a100", "-o", "{d}/all_reduce.2.et"],
        ["timeline", "{d}/all_reduce", "-o", "{d}/all_reduce.3.et"],
        ["transform", "{d}/all_reduce", "-o", "{d}/all_reduce", "--scale-compute", "2"],
        ["transform", "{d}/all_reduce", "-o", "{d}/all_reduce", "--scale-compute", "2", "--stream"],
    ],
)
def test_an_output_naming_an_input_is_refused_and_inputs_stay_intact(job, samples_dir, args):
    before = {p.name: p.read_bytes() for p in job.parent.iterdir()}
    res = CliRunner().invoke(cli, [a.format(d=job.parent) for a in args])
    assert res.exit_code == 1
    assert (
        "refusing to overwrite an input of this command" in res.stderr
        or "the output prefix already holds rank files" in res.stderr
        or "the output prefix is the trace set this command reads" in res.stderr  # the reader's lock, at the start
    )
    assert {p.name: p.read_bytes() for p in job.parent.iterdir()} == before  # nothing changed, no temp files


def test_a_prefix_with_stale_ranks_is_refused(tmp_path):
    four = TraceSet([ExecutionTrace([Node(id=1)]) for _ in range(4)])
    write_traceset(four, tmp_path / "job")
    with pytest.raises(TracekitError, match=r"job.2.et, job.3.et\); reading it back would mix them in"):
        write_traceset(TraceSet([ExecutionTrace([Node(id=1)]) for _ in range(2)]), tmp_path / "job")
    with pytest.raises(TracekitError, match="job.0.et"):
        write_traceset(four, tmp_path / "job", compress=True)  # .et.gz beside .et of the same rank
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "job.0.et",
        "job.1.et",
        "job.2.et",
        "job.3.et",
        "job.comm_groups.json",
    ]


def test_an_interrupted_trace_set_write_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with TraceSetWriter(tmp_path / "job") as writer:
            writer.add(0, encode_trace(ExecutionTrace([Node(id=1)])))
            writer.add(1, encode_trace(ExecutionTrace([Node(id=1)])))
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_streaming_transform_with_one_bad_rank_writes_no_rank(job, tmp_path):
    (job.parent / "all_reduce.1.et").write_bytes(b"\x05\x0a\x03abc\x09")  # rank 1 corrupt
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["transform", str(job), "-o", str(out / "x"), "--scale-compute", "2", "--stream"])
    assert res.exit_code == 1 and "all_reduce.1.et" in res.stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_replay_of_a_job_with_a_missing_rank_names_the_rank(job):
    (job.parent / "all_reduce.2.et").unlink()
    for extra in ([], ["--no-fold"]):
        res = CliRunner().invoke(cli, ["replay", str(job), "--hw", "dgx-a100", *extra])
        assert res.exit_code == 1
        assert "no trace for rank(s) 2: the job has 4 ranks" in res.stderr
