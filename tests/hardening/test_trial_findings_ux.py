"""Output faults a fresh-user trial found (session of 2026-12-01): labels, table widths, "wrote" lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _hardkit import run

from tracekit.io import write_traceset

REPO = Path(__file__).resolve().parents[2]
DIST_WS2 = REPO / "sample_traces" / "pytorch" / "dist_ws2"


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory) -> Path:
    """The bundled 2-rank gloo capture (ET + Kineto), converted; returns its prefix."""
    from tracekit.converters.pytorch import convert_pytorch

    ts = convert_pytorch(
        sorted(DIST_WS2.glob("et_rank*.json")), sorted(DIST_WS2.glob("kineto_rank*.json")), executor="serial"
    )
    prefix = tmp_path_factory.mktemp("gloo") / "job"
    write_traceset(ts, prefix)
    return prefix


def test_check_replay_labels_the_job_row_all_ranks_not_rank_minus_one(gloo_job, tmp_path):
    res = run("check-replay", gloo_job, "-o", tmp_path / "c.json", "--html-out", tmp_path / "c.html")
    assert res.exit_code == 0, res.stderr
    first_cells = [line.split("│")[1].strip() for line in res.stdout.splitlines() if line.startswith("│")]
    assert first_cells == ["0", "1", "all ranks"]  # two ranks' ProfilerStep#2, then the job's
    assert "-1" not in first_cells
    assert "<tr><td>all ranks</td><td>2</td>" in (tmp_path / "c.html").read_text()
    # the JSON keeps the documented rank -1 for the job row
    assert [r["rank"] for r in json.loads((tmp_path / "c.json").read_text())["rows"]] == [0, 1, -1]
    # and both files are announced on stderr, as replay announces its outputs
    assert res.stderr.splitlines() == [f"wrote {tmp_path / 'c.json'}", f"wrote {tmp_path / 'c.html'}"]


def test_dump_and_load_say_what_they_wrote_on_stderr_and_keep_stdout_for_data(tmp_path):
    et = REPO / "sample_traces" / "chakra" / "all_reduce.0.et"
    res = run("dump", et, "-o", tmp_path / "a.json")
    assert res.exit_code == 0, res.stderr
    size = (tmp_path / "a.json").stat().st_size
    assert res.stdout == ""
    assert res.stderr == f"wrote {tmp_path / 'a.json'} (rank 0, 1 nodes, {size:,} bytes of JSON)\n"
    res = run("load", tmp_path / "a.json", "-o", tmp_path / "b.0.et")
    assert (res.exit_code, res.stdout) == (0, "")
    assert res.stderr == f"wrote {tmp_path / 'b.0.et'} (rank 0, 1 nodes)\n"
    assert (tmp_path / "b.0.et").read_bytes() == et.read_bytes()
    # -q: nothing but errors; --json: the data on stdout only
    assert run("-q", "load", tmp_path / "a.json", "-o", tmp_path / "c.0.et").stderr == ""
    res = run("load", tmp_path / "a.json", "-o", tmp_path / "d.0.et", "--json")
    assert json.loads(res.stdout) == {"output": str(tmp_path / "d.0.et"), "rank": 0, "nodes": 1}
    assert res.stderr == ""
    # to stdout, dump writes only the document
    res = run("dump", et)
    assert json.loads(res.stdout)["nodes"] and res.stderr == ""
