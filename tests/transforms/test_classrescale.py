"""Rescale of a rank-class set without per-rank traces (issue 17): equal to rescaling the expanded job."""

from __future__ import annotations

import pytest
from _tfhelpers import class_set  # noqa: F401  (the shared fixture)
from columnar_cases import EXPECTED, digest, without_streams

from tracekit.errors import ConfigError
from tracekit.transforms import Compact, Rescale, ScaleCompute


def _rescaled(cs, tr, out):
    from tracekit.sets.classset import read_class_set
    from tracekit.transforms.classrescale import load_classes, rescale_classes, write_classes

    classes, world = rescale_classes(load_classes(cs), cs.world_size, tr)
    return read_class_set(write_classes(out, world, classes))


@pytest.mark.parametrize(
    "tr",
    [Rescale(dp=4), Rescale(dp=4, mode="strong"), Rescale(dp=1), Rescale(dp=3)],
    ids=["weak4", "strong4", "weak1", "weak3"],
)
def test_class_rescale_equals_expanded(class_set, tr, tmp_path):
    out = _rescaled(class_set, tr, tmp_path / "out")
    assert out.world_size == 2 * 2 * tr.dp
    assert len(out.classes) == 2  # still one class per pipeline stage
    assert digest(out.to_traceset()) == digest(tr.apply(class_set.to_traceset()))


def test_class_rescale_matches_recorded_object_path(class_set, tmp_path):
    """The dp 2 -> 4 weak result has the digest the object path gave before the class path existed (recorded
    before generated collectives carried a ``stream``: compared without it)."""
    import json

    want = json.loads(EXPECTED.read_text())["generated_llm"]["rescale_weak_4"]
    got = without_streams(_rescaled(class_set, Rescale(dp=4), tmp_path / "o").to_traceset())
    assert digest(got) == want


def test_strong_scaling_refusal_is_the_same(class_set, tmp_path):
    with pytest.raises(ConfigError, match="does not divide the global batch"):
        _rescaled(class_set, Rescale(dp=3, mode="strong"), tmp_path / "o")


def test_pipeline_with_rescale_and_classwise_steps(class_set, tmp_path):
    from tracekit.sets.classset import read_class_set
    from tracekit.transforms import Pipeline
    from tracekit.transforms.classrescale import transform_classes

    steps = [ScaleCompute(2), Rescale(dp=4), Compact()]
    manifest, n_in, n_out = transform_classes(class_set, steps, tmp_path / "p", source="job")
    out = read_class_set(manifest)
    expected = Pipeline(steps).run(class_set.to_traceset(), source="job")
    assert digest(out.to_traceset()) == digest(expected)
    assert n_in == sum(len(t) for t in class_set.to_traceset())
    assert n_out == sum(len(t) for t in expected)


def test_cli_rescales_a_class_set_as_classes(class_set, tmp_path):
    from click.testing import CliRunner

    from tracekit.sets.classset import read_class_set
    from tracekit.cli import cli

    res = CliRunner().invoke(cli, ["transform", str(class_set.manifest), "-o", str(tmp_path / "dp8"), "--dp", "8"])
    assert res.exit_code == 0, res.output
    assert "2 rank classes" in res.output
    out = read_class_set(tmp_path / "dp8.classes.json")
    assert out.world_size == 32 and not list(tmp_path.glob("dp8.*.et"))[2:]  # two class files, no rank files
    assert [len(c.ranks) for c in out.classes] == [16, 16]
