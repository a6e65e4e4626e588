"""Pipelines: composition, provenance, TOML files, no partial output; the CLI."""

from __future__ import annotations

import json

import pytest
from _tfhelpers import coll, comp
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import ConfigError, TracekitError, TransformError
from tracekit.io import read_traceset, write_traceset
from tracekit.model import ExecutionTrace
from tracekit.sets.traceset import TraceSet
from tracekit.transforms import Compact, Pipeline, Rescale, ScaleComm, ScaleCompute, load_pipeline, provenance_of


def _job(n=2):
    return TraceSet([ExecutionTrace([comp(0, (), 100), comp(1, [0], 300), coll(2, [0, 1], 4096)]) for _ in range(n)])


def test_pipeline_composes_and_records_provenance():
    out = Pipeline([ScaleCompute(0.5), Rescale(dp=8), Compact()]).run(_job(), source="in/job")
    assert len(out) == 8
    assert [n.duration_ns for n in out[7].nodes] == [200, 0]  # 50 + 150 merged, the collective
    rec = provenance_of(out[7])
    assert rec["input"] == "in/job"
    assert [s["transform"] for s in rec["steps"]] == ["ScaleCompute", "Rescale", "Compact"]
    assert rec["steps"][1] == {"transform": "Rescale", "dp": 8, "mode": "weak", "global_batch": None}
    # a second pipeline keeps the first record
    again = Pipeline([ScaleComm(2)]).run(out, source="mid/job")
    assert provenance_of(again[0])["previous"]["input"] == "in/job"
    assert again[0].nodes[-1].comm_bytes == 8192


@pytest.mark.parametrize("raw", ["[1, 2]", "{not json"])
def test_provenance_that_is_not_a_json_object_is_named(raw):
    """A list where the record (a dict) belongs crashed ``stamp_provenance`` with an AttributeError before."""
    job = _job(1)
    trace = job[0]
    bad = ExecutionTrace(trace.nodes, trace.metadata.with_attr("tracekit_provenance", raw, "string_val"), rank=0)
    with pytest.raises(TransformError, match=r"rank 0.*'tracekit_provenance' is not a JSON object"):
        Pipeline([ScaleComm(2)]).run(TraceSet([bad]), source="x")


def test_pipeline_file(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(
        'input = "a/job"\noutput = "b/job"\n[[transform]]\nkind = "scale_compute"\nfactor = 2\n'
        '[[transform]]\nkind = "scale_comm"\nfactor = 0.5\nper_type = { all_reduce = 3 }\n'
        '[[transform]]\nkind = "keep_ranks"\nranks = [0, 1]\n'
    )
    pf = load_pipeline(f)
    assert (pf.input, pf.output) == ("a/job", "b/job")
    out = pf.pipeline.run(_job(3))
    assert (
        len(out) == 2
        and out.process_groups["0"] == (0, 1)
        and out[0].nodes[2].comm_bytes == 3 * 4096
        and out[0].nodes[1].duration_ns == 600
    )


@pytest.mark.parametrize(
    "text, msg",
    [
        ("[[transform]]\nkind = 'warp'\n", "transform 1: unknown transform kind 'warp'"),
        ("[[transform]]\nkind = 'rescale'\ndp = 0\n", "transform 1: rescale: dp must be an integer >= 1, got 0"),
        ("[[transform]]\nkind = 'compact'\nspeed = 1\n", "transform 1: compact: unknown parameter\\(s\\) speed"),
        ("x = 1\n", "unknown top-level key"),
        ("[[transform]\n", "not valid TOML"),
    ],
)
def test_pipeline_file_errors_name_file_and_step(tmp_path, text, msg):
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=msg) as info:
        load_pipeline(f)
    assert str(info.value).startswith(str(f))


def test_pipeline_never_writes_partial_output(tmp_path):
    ts = _job(3)
    # rank 2's message becomes too large for int64: encoding fails after ranks 0 and 1 encoded fine
    big = TraceSet({0: ts[0], 1: ts[1], 2: ExecutionTrace([coll(0, (), 2**62)])})
    with pytest.raises(TracekitError, match=r"rank 2: node 0: .* out of range"):
        Pipeline([ScaleComm(per_type={"all_reduce": 4.0})]).write(big, tmp_path / "out/job")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_cli_transform_writes_and_records(tmp_path):
    write_traceset(_job(), tmp_path / "in/job")
    r = CliRunner().invoke(
        cli,
        [
            "transform",
            str(tmp_path / "in/job"),
            "-o",
            str(tmp_path / "out/job"),
            "--scale-compute",
            "0.5",
            "--dp",
            "4",
            "--compact",
            "--per-rank",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "wrote 4 ranks" in r.stderr and "2 -> 4 ranks, 6 -> 8 nodes" in r.stderr
    out = read_traceset(tmp_path / "out/job")
    assert len(out) == 4
    rec = json.loads(out[3].metadata.get_attr("tracekit_provenance"))
    assert rec["input"] == str(tmp_path / "in/job")
    assert [s["transform"] for s in rec["steps"]] == ["ScaleCompute", "Rescale", "Compact"]


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--scale-compute", "0"], "Invalid value for '--scale-compute': 0.0 is not in the range x>0"),
        (["--dp", "-4"], "Invalid value for '--dp': -4 is not in the range x>=1"),
        (["--keep-iteration", "3"], "no iteration 3"),
        (["--ranks", "7-1"], "end before start"),
    ],
)
def test_cli_bad_input_one_line_exit_1_no_output(tmp_path, args, msg):
    _run_and_check(tmp_path, args, msg, 1)


@pytest.mark.parametrize(
    "args, out, msg",
    [
        ([], ["-o", "OUT"], "no transform given: add a transform option or --pipeline FILE"),
        (["--scale-compute", "2"], [], "no output: give -o OUT or an output in the pipeline file"),
    ],
)
def test_cli_missing_step_or_output_is_a_usage_error_exit_2(tmp_path, args, out, msg):
    """docs/cli.md: a missing argument is a usage error (exit 2, one line naming the command's --help)."""
    r = _run_and_check(tmp_path, args + [a.replace("OUT", str(tmp_path / "out/job")) for a in out], msg, 2, o=False)
    assert "tracekit transform --help" in r.stderr


def _run_and_check(tmp_path, args, msg, code, o=True):
    write_traceset(_job(), tmp_path / "in/job")
    import subprocess
    import sys
    from pathlib import Path

    # the installed entry point: the real error rendering (one line, exit 1)
    exe = Path(sys.executable).with_name("tracekit")
    r = subprocess.run(
        [str(exe), "transform", str(tmp_path / "in/job"), *(["-o", str(tmp_path / "out/job")] if o else []), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == code
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0]
    assert not (tmp_path / "out").exists()
    return r


def test_cli_pipeline_file(tmp_path):
    write_traceset(_job(), tmp_path / "in/job")
    f = tmp_path / "p.toml"
    f.write_text(
        f'input = "{tmp_path}/in/job"\noutput = "{tmp_path}/out/job"\n[[transform]]\nkind = "rescale"\ndp = 3\n'
    )
    r = CliRunner().invoke(cli, ["transform", "--pipeline", str(f)])
    assert r.exit_code == 0, r.output
    assert len(read_traceset(tmp_path / "out/job")) == 3
