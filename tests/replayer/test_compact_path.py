"""The compact result's critical path (results/compact.py: path_dict) is dataclasses.asdict's, without its copies."""

from __future__ import annotations

from dataclasses import asdict, fields

from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, generate_llm, llm_preset
from tracekit.replayer import replay
from tracekit.replayer.results.compact import path_dict
from tracekit.replayer.results.parts import CriticalPath


def test_path_dict_equals_asdict_on_a_replayed_pipeline():
    model, _ = llm_preset("gpt3-1.3b")
    cfg = LLMConfig(model, ParallelSpec(dp=2, tp=1, pp=2), global_batch_size=8, micro_batch_size=1)
    path = replay(generate_llm(cfg, Roofline(1e15, 3e12)), "dgx-h100").critical_path
    assert len(path.steps) > 100
    assert path_dict(path) == asdict(path)
    assert type(path_dict(path)["steps"]) is tuple
    assert [f.name for f in fields(CriticalPath)] == list(path_dict(path))  # a new field must be added there too
