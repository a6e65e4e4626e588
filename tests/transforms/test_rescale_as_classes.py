"""``transform --dp`` of converted real captures writes a rank-class set whose replay equals the per-rank route
(issue 34 item 1), and a class set's replay projects compute once per class with the same iteration time."""

from __future__ import annotations

import tarfile

import orjson
import pytest
from click.testing import CliRunner

from tracekit.sets.classset import read_class_set
from tracekit.cli import cli

pytestmark = pytest.mark.realdata


def _run(*args: str, said: bool = False) -> str:
    """Run tracekit; its stdout (``said``: what it printed on stdout and stderr)."""
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res.output if said else res.stdout


@pytest.fixture(scope="module")
def dlrm(real_dir, tmp_path_factory):
    """param-dlrm (8 ranks on V100, ET + Kineto) converted: the prefix."""
    base = tmp_path_factory.mktemp("dlrm")
    for name in ("dlrm_pytorch_et.tar.gz", "dlrm_kineto.tar.gz"):
        with tarfile.open(real_dir / "pytorch" / "param-dlrm" / name) as tar:
            tar.extractall(base, filter="data")
    et, kineto = base / "dlrm_pytorch_et" / "dlrm_eg_*.json", base / "dlrm_kineto" / "worker*.json"
    _run("-q", "convert", "pytorch", "--et", str(et), "--kineto", str(kineto), "-o", str(base / "job"))
    return base / "job"


def _replay(prefix) -> dict:
    return orjson.loads(_run("replay", str(prefix), "--hw", "dgx-h100", "--json", "--per-rank"))


@pytest.mark.parametrize("dp", [16])
def test_dlrm_dp_as_classes_replays_as_the_rank_files(dlrm, tmp_path, dp):
    classes, files = tmp_path / "classes" / "job", tmp_path / "files" / "job"
    _run("-q", "transform", str(dlrm), "--dp", str(dp), "-o", str(classes))
    _run("-q", "transform", str(dlrm), "--dp", str(dp), "--per-rank", "-o", str(files))
    cs = read_class_set(f"{classes}.classes.json")
    # each of the 8 captured ranks stands for the 2 new ranks that copy it (r and r + 8)
    assert cs.world_size == dp and [c.ranks for c in cs.classes] == [(r, r + 8) for r in range(8)]
    assert len(list(files.parent.glob("job.*.et"))) == dp and not list(classes.parent.glob("job.[0-9]*.et"))
    a, b = _replay(classes), _replay(files)
    assert a["compute_plan"]["method"] == b["compute_plan"]["method"] == "projected"  # V100 capture -> H100
    assert a["iteration_time_ns"] == b["iteration_time_ns"] == 14_524_972  # after issue 27's ET-path timing rules
    assert a["ranks"] == b["ranks"] and a["critical_path"] == b["critical_path"]
    counts = {m: v["nodes"] for m, v in a["compute_projection"]["methods"].items()}
    assert counts == {m: v["nodes"] for m, v in b["compute_projection"]["methods"].items()}
    # over all 16 ranks; kept_host holds the issue:<op> host nodes of issue 27 (16 a rank: 8 collectives, 2 parts each)
    assert counts == {"projected": 3_436, "kept_no_cost": 668, "kept_host": 26_640}
    expanded = tmp_path / "expanded" / "job"  # the rank files on request: tracekit expand of the class set
    _run("-q", "expand", str(classes), "-o", str(expanded))
    assert len(list(expanded.parent.glob("job.*.et"))) == dp
    assert _replay(expanded)["ranks"] == b["ranks"]


def test_resnet_dp_as_one_class(real_dir, tmp_path):
    """param-resnet (one rank, ET only: roofline compute) at dp 4: one class of 4 ranks, the per-rank files' time."""
    src = tmp_path / "src" / "job"
    et = real_dir / "pytorch" / "param-resnet" / "resnet_et.json.gz"
    _run("-q", "convert", "pytorch", "--et", str(et), "-o", str(src))
    classes, files = tmp_path / "classes" / "job", tmp_path / "files" / "job"
    out = _run("transform", str(src), "--dp", "4", "-o", str(classes), said=True)
    assert "(1 rank class of 4 ranks;" in out and "1 -> 4 ranks, 14347 -> 57388 nodes (Rescale)" in out
    _run("-q", "transform", str(src), "--dp", "4", "--per-rank", "-o", str(files))
    a, b = _replay(classes), _replay(files)
    assert a["iteration_time_ns"] == b["iteration_time_ns"] and a["ranks"] == b["ranks"]
    assert a["folding"] == {"classes": 1, "ranks": 4, "reason": None}


def test_dlrm_with_uneven_all_to_alls_folds_and_equals_every_rank_simulated(dlrm, tmp_path):
    """param-dlrm's all-to-alls carry per-peer sizes (issue 27): the fold plan sizes each instance from all its
    members (fold_uneven), so the job folds (8 classes of 2 ranks) with the unfolded figures to the ns."""
    classes = tmp_path / "classes" / "job"
    _run("-q", "transform", str(dlrm), "--dp", "16", "-o", str(classes))
    folded = _replay(classes)
    every = orjson.loads(_run("replay", str(classes), "--hw", "dgx-h100", "--json", "--per-rank", "--no-fold"))
    assert folded["folding"] == {"classes": 8, "ranks": 16, "reason": None}
    assert folded["iteration_time_ns"] == every["iteration_time_ns"] == 14_524_972
    assert folded["ranks"] == every["ranks"] and folded["critical_path"] == every["critical_path"]
    assert folded["collectives"] == every["collectives"]  # all-to-all rows with the uniform-equivalent sizes
    a2a = [c for c in folded["collectives"] if c["kind"] == "ALL_TO_ALL"]
    assert a2a and all(c["comm_bytes"] > 0 for c in a2a)
