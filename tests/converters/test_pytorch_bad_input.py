"""Bad PyTorch inputs through the CLI: one clear line on stderr, exit code 1, no output file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from _pytorch_synth import cpu, et_doc, kineto_doc, mlp_et, mlp_kineto, node, roots, write
from tracekit.cli import cli
from tracekit.cli._common import invoke_for_test


def _run(tmp_path: Path, et: Path, kineto: Path | None = None):
    args = ["convert", "pytorch", "--et", str(et), "-o", str(tmp_path / "out" / "job"), "--executor", "serial"]
    if kineto is not None:
        args += ["--kineto", str(kineto)]
    return CliRunner().invoke(_Main(), args)


class _Main:
    """Adapter so CliRunner runs the CLI with its real error rendering (run_cli)."""

    name = "tracekit"

    def main(self, args=None, prog_name=None, **extra):
        invoke_for_test(cli, list(args))


def _check(tmp_path, result, *needles):
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tracekit: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def _text(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = json.dumps(mlp_et())


@pytest.mark.parametrize(
    "text, needle",
    [
        (GOOD[:-2] + ",]}", "trailing comma"),
        (GOOD.replace("}, {", "} {", 1), "missing comma"),
        (GOOD[: GOOD.index('"aten::addmm"') + 30], "truncated"),
        (GOOD.replace('"start_ts": 0', '"start_ts": NaN'), "bare 'NaN'"),
        (GOOD.replace('"start_ts": 0', '"start_ts": inf'), "bare 'inf'"),
    ],
)
def test_invalid_et_json(tmp_path, text, needle):
    et = _text(tmp_path, "et_rank0.json", text)
    _check(tmp_path, _run(tmp_path, et), "et_rank0.json", "line 1 column", needle)


def test_truncated_gzip_kineto_node_object(tmp_path):
    et = write(tmp_path / "et_rank0.json", mlp_et())
    data = json.dumps(mlp_kineto())
    k = tmp_path / "kineto_rank0.json.gz"
    k.write_bytes(gzip.compress(data[: data.index('"aten::t"') + 20].encode()))
    _check(tmp_path, _run(tmp_path, et, k), "kineto_rank0.json.gz", "truncated")


def test_nan_timestamp_in_kineto(tmp_path):
    et = write(tmp_path / "et_rank0.json", mlp_et())
    doc = mlp_kineto()
    doc["traceEvents"][2]["ts"] = "NaN"
    _check(tmp_path, _run(tmp_path, et, write(tmp_path / "kineto_rank0.json", doc)), "kineto_rank0.json")


def test_missing_parent(tmp_path):
    et = write(tmp_path / "et_rank0.json", et_doc(roots() + [node(10, "aten::mm", 77, 1)]))
    _check(tmp_path, _run(tmp_path, et), "et_rank0.json", "node 10", "parent id 77")


def test_pair_from_different_iterations(tmp_path):
    et = write(tmp_path / "et_rank0.json", mlp_et())
    k = write(tmp_path / "kineto_rank0.json", mlp_kineto(rf_base=500))
    _check(tmp_path, _run(tmp_path, et, k), "different profiler steps", "501..505")


def test_kineto_with_zero_events(tmp_path):
    et = write(tmp_path / "et_rank0.json", mlp_et())
    k = write(tmp_path / "kineto_rank0.json", kineto_doc([]))
    _check(tmp_path, _run(tmp_path, et, k), "kineto_rank0.json")


def test_unknown_collective(tmp_path):
    et = write(tmp_path / "et_rank0.json", et_doc(roots() + [node(10, "c10d::allshuffle_", 2, 1)]))
    _check(tmp_path, _run(tmp_path, et), "node 10", "unknown communication op 'c10d::allshuffle_'")


def test_unsupported_schema(tmp_path):
    et = write(tmp_path / "et_rank0.json", mlp_et() | {"schema": "9.9.9-chakra.0.0.4"})
    _check(tmp_path, _run(tmp_path, et), "unsupported ET schema '9.9.9-chakra.0.0.4'", "1.0.1")


def test_unlinkable_names_allowed_with_flag(tmp_path):
    et = write(tmp_path / "et_rank0.json", mlp_et())
    k = write(tmp_path / "kineto_rank0.json", kineto_doc([cpu("aten::unrelated", 0, 5, ext=900)]))
    _check(tmp_path, _run(tmp_path, et, k), "link rate is zero", "--allow-unlinked")
    result = CliRunner().invoke(
        _Main(),
        [
            "-q",
            "convert",
            "pytorch",
            "--et",
            str(et),
            "--kineto",
            str(k),
            "-o",
            str(tmp_path / "out" / "job"),
            "--allow-unlinked",
            "--executor",
            "serial",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "out" / "job.0.et").is_file()
