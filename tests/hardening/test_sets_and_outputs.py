"""Issue 32, kind 5: one form per prefix, readers and writers of a prefix exclusive, outputs distinct and whole.

The trial found a prefix holding a class set and rank files at once (`replay P` 113.0 ms, `replay P/..` 66.2 ms),
a reader racing a writer of the same prefix, two outputs of one command on one path overwriting each other,
`export astra` replacing a user's `system.json`, `sweep` leaving an old `sweep.html` beside new tables after a
full disk, a full-disk error naming no file, and `-o /dev/null` writing `/dev/null.0.et`.
"""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest
from _hardkit import leftovers, one_line_error, ring_job, run

ONE_FORM = "one prefix holds one form of a trace set (a class set or rank files): remove one or choose another prefix"
LLM = ("generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "2", "--global-batch", "4")


def test_a_prefix_holds_a_class_set_or_rank_files_never_both(tmp_path):
    prefix = tmp_path / "j"
    assert run(*LLM, "--classes", "-o", prefix).exit_code == 0
    line = one_line_error(run(*LLM, "-o", prefix))  # the other form on the same prefix
    assert line == f"tracekit: error: {prefix}: the prefix already holds a class set (j.classes.json); {ONE_FORM}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.class0.et", "j.classes.json"]
    (tmp_path / "j.0.et").write_bytes((tmp_path / "j.class0.et").read_bytes())  # made by hand: both forms
    line = one_line_error(run("replay", prefix, "--hw", "dgx-a100"))
    assert line == (
        f"tracekit: error: {prefix}: the prefix holds both a class set (j.classes.json) and rank files "
        f"(j.0.et ...); {ONE_FORM}"
    )
    line = one_line_error(run("replay", tmp_path, "--hw", "dgx-a100"))
    assert line == (
        f"tracekit: error: {tmp_path}: the folder holds both a class set (j.classes.json) and rank files "
        "(j.0.et ...): name the one to read (its prefix or manifest)"
    )
    other = tmp_path / "k"
    assert run(*LLM, "-o", other).exit_code == 0
    line = one_line_error(run(*LLM, "--classes", "-o", other))
    assert line == f"tracekit: error: {other}: the prefix already holds rank files (k.0.et ...); {ONE_FORM}"


_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX if sys.argv[2] == "write" else fcntl.LOCK_SH)
print("held", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("holder", ["write", "read"])
def test_a_reader_and_a_writer_of_one_prefix_exclude_each_other(holder, tmp_path):
    prefix = ring_job(tmp_path)
    lock = tmp_path / ".job.tk-lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(lock), holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        if holder == "write":  # a replay while another command rewrites the set would mix old and new ranks
            line = one_line_error(run("replay", prefix, "--hw", "dgx-a100"))
            assert line == (
                f"tracekit: error: {prefix}: another tracekit command is writing this trace set right now "
                "(lock .job.tk-lock is held); wait for it, reading it now could mix old and new ranks"
            )
        else:  # a writer while another command reads the set
            line = one_line_error(run("transform", ring_job(tmp_path / "src"), "--scale-comm", "2", "-o", prefix))
            assert line == (
                f"tracekit: error: {prefix}: another tracekit command is reading this output prefix right now "
                "(lock .job.tk-lock is held); wait for it or choose another prefix"
            )
            assert run("info", prefix).exit_code == 0  # readers share the lock
    finally:
        proc.communicate("go\n", timeout=30)
    res = run("replay", prefix, "--hw", "dgx-a100")  # free again, and the last reader removed the lock file
    assert res.exit_code == 0, res.stderr
    assert not lock.exists()


def test_the_set_a_command_reads_is_refused_as_its_output_prefix(tmp_path):
    prefix = ring_job(tmp_path)
    line = one_line_error(run("transform", prefix, "--scale-comm", "2", "-o", prefix))
    assert line == (
        f"tracekit: error: {prefix}: the output prefix is the trace set this command reads; choose another "
        "output prefix"
    )


def test_two_outputs_of_one_command_on_one_path_are_refused_before_it_runs(tmp_path):
    prefix = ring_job(tmp_path)
    out = tmp_path / "r.json"
    line = one_line_error(run("replay", prefix, "--hw", "dgx-a100", "-o", out, "--timeline-out", out))
    assert line == f"tracekit: error: --output and --timeline-out both name {out}: give each output its own path"
    assert not out.exists()
    res = run("replay", prefix, "--hw", "dgx-a100", "-o", "/dev/null", "--timeline-out", "/dev/null")
    assert res.exit_code == 0, res.stderr  # discarded twice is fine


def test_dev_null_is_refused_as_a_trace_set_prefix():
    line = one_line_error(run("generate", "micro", "--collective", "all_reduce", "--ranks", "2", "-o", "/dev/null"))
    assert line == (
        "tracekit: error: /dev/null: is not a file prefix: a trace set is written as <prefix>.<rank>.et files "
        "beside it; give a prefix such as out/job (a device such as /dev/null cannot hold them)"
    )
    assert not Path("/dev/null.0.et").exists()


def test_export_astra_refuses_to_overwrite_a_file_it_did_not_write(tmp_path):
    data = Path(__file__).parents[1] / "data" / "astra"
    spec = tmp_path / "r4.toml"
    assert run(
        "hw", "import-astra", "--system", data / "Ring.json", "--network", data / "network_ring_4.yml", "-o", spec
    )
    traces = Path(__file__).parents[2] / "sample_traces" / "chakra" / "all_reduce"
    out = tmp_path / "ex"
    out.mkdir()
    (out / "run.sh").write_text("#!/bin/sh\nmy own script\n")
    line = one_line_error(run("export", "astra", traces, "--hw", spec, "-o", out))
    assert line == (
        f"tracekit: error: {out / 'run.sh'}: exists and was not written by `tracekit export astra` (or was edited "
        "since); remove it or export into another folder"
    )
    assert sorted(p.name for p in out.iterdir()) == ["run.sh"]
    (out / "run.sh").unlink()
    assert run("export", "astra", traces, "--hw", spec, "-o", out).exit_code == 0
    assert run("export", "astra", traces, "--hw", spec, "-o", out).exit_code == 0  # its own files: replaced


class _FullDisk:
    """A file whose every write fails as on a full disk."""

    def __init__(self, real):
        self.real = real

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.real.close()


def test_sweep_outputs_are_all_or_nothing_and_a_full_disk_names_the_file(tmp_path, monkeypatch):
    import os

    import tracekit.output as output

    prefix = ring_job(tmp_path)
    out = tmp_path / "sw"
    assert run("sweep", prefix, "--hw", "dgx-a100", "--hw", "dgx-h100", "-o", out).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == ["sweep.csv", "sweep.html", "sweep.json"]
    real_fdopen = os.fdopen
    calls = []

    def fdopen(fd, *args, **kwargs):  # the second file of the unit meets a full disk
        calls.append(fd)
        fh = real_fdopen(fd, *args, **kwargs)
        return _FullDisk(fh) if len(calls) == 2 else fh

    monkeypatch.setattr(output.os, "fdopen", fdopen)
    line = one_line_error(run("sweep", prefix, "--hw", "dgx-a100", "--no-plot", "-o", out))
    assert line == f"tracekit: error: {out / 'sweep.json'}: No space left on device"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and leftovers(tmp_path) == []
    monkeypatch.setattr(output.os, "fdopen", real_fdopen)
    assert run("sweep", prefix, "--hw", "dgx-a100", "--no-plot", "-o", out).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["sweep.csv", "sweep.json"]  # no stale sweep.html beside them
