"""The unfolded replay runs with the cyclic garbage collector paused and gives it back as it found it (issue 34
item 5: full collections rescanning the whole job made an unfolded replay grow faster than its ranks).

The job: gpt3-1.3b cut to 2 layers, tp 2 x pp 2 x dp 2 (8 ranks), written as rank files and replayed unfolded.
"""

from __future__ import annotations

import gc

import pytest
from _engine_kit import write_small_llm

from tracekit.io import read_traceset
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation import program


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> str:
    return write_small_llm(tmp_path_factory.mktemp("gc"))


@pytest.mark.parametrize("enabled", [True, False])
def test_compile_runs_with_the_collector_paused_and_its_state_is_restored(job, monkeypatch, enabled):
    seen = []
    compile_program = program.compile_program

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return compile_program(*args, **kwargs)

    monkeypatch.setattr(program, "compile_program", spy)
    ts = read_traceset(job)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        result = replay(ts, "dgx-h100", options=ReplayOptions(fold=False))
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False] and len(result.ranks) == 8
