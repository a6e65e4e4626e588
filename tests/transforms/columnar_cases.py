"""Cases for the columnar-transform equality tests (issue 17): inputs, transforms and a digest of outputs.

The expected digests in ``data/columnar_expected.json`` were computed with the
per-node object path of the transforms (commit 3b2720b, before the columnar
path existed) by running this module as a script::

    .venv/bin/python tests/transforms/columnar_cases.py --write

A digest covers every output rank: its rank number, its metadata and every
node, each re-encoded canonically (``node_to_pb(...).SerializeToString(deterministic=True)``),
so two outputs have the same digest exactly when they decode to equal traces.
"""

from __future__ import annotations

import functools
import hashlib
import os
import json
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).resolve().parent / "data" / "columnar_expected.json"
REAL = Path(os.environ.get("TRACEKIT_REAL_DATA", ROOT.parent / "shared" / "real"))  # as tests/conftest.py

# input name -> (where, glob relative to it); "samples" = sample_traces, "real" = ../shared/real
INPUTS: dict[str, tuple[str, str]] = {
    "sample_all_reduce": ("samples", "chakra/all_reduce.*.et"),
    "sample_custom_allreduce": ("samples", "chakra/custom_allreduce.*.et"),
    "sample_feeder": ("samples", "chakra/feeder.0.et"),
    "real_resnet": ("real", "chakra/chakra-converter-resnet/resnet.0.et"),
    "real_feeder": ("real", "chakra/chakra-feeder-tests/chakra.0.et"),
}


def transforms() -> dict[str, Any]:
    """Case name -> transform (built lazily so importing this module stays cheap)."""
    from tracekit.transforms import Compact, DropCpuOps, RemoveNodes, Rescale, Retarget, ScaleComm, ScaleCompute

    return {
        "scale_compute_2": ScaleCompute(2),
        "scale_compute_0.37_device": ScaleCompute(0.37, cpu=False),
        "scale_compute_3_pattern": ScaleCompute(3, name_pattern="conv|relu|COMP"),
        "scale_compute_1.5_mem": ScaleCompute(1.5, node_types=("COMP", "MEM_LOAD", "MEM_STORE"), cpu=True),
        "scale_comm_2": ScaleComm(2),
        "scale_comm_per_type": ScaleComm(1.5, per_type={"all_reduce": 4, "all_gather": 0.25}, p2p=False),
        "retarget_a100_h100": Retarget("a100-80gb", "h100-sxm"),
        "retarget_flops": Retarget("v100", "b200", unknown="flops"),
        "compact": Compact(),
        "compact_reduce_only": Compact(merge=False),
        "compact_merge_only": Compact(reduce=False),
        "drop_cpu_ops": DropCpuOps(),
        "remove_colls": RemoveNodes(node_types=("COMM_COLL",)),
        "remove_pattern": RemoveNodes(name_pattern="relu|1"),
        "rescale_weak_4": Rescale(dp=4),
        "rescale_strong_4": Rescale(dp=4, mode="strong"),
        "rescale_weak_1": Rescale(dp=1),
    }


def llm_config(zero_stage: int = 1):
    """The ``LLMConfig`` of a small GPT job: tp 2, pp 2, dp 2 (ranks 0-3 stage 0, 4-7 stage 1), ZeRO ``zero_stage``."""
    from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec

    m = ModelSpec("small", num_layers=4, hidden_size=1024, num_heads=16, seq_length=512, vocab_size=32000)
    return LLMConfig(m, ParallelSpec(dp=2, tp=2, pp=2, zero_stage=zero_stage), global_batch_size=8, micro_batch_size=1)


def generated_llm(zero_stage: int = 1):
    """The job of :func:`llm_config` generated as a TraceSet, as the generator wrote it when the digests were
    recorded: without the ``stream`` attribute its collectives carry since they run one stream per process-group
    kind (:func:`without_streams`; the recorded object-path digests stay the reference)."""
    from tracekit.converters.generators.llm import generate_llm

    return without_streams(generate_llm(llm_config(zero_stage)))


def without_streams(traceset):
    """``traceset`` with every node's ``stream`` attribute removed (the generated job's collectives carry one)."""

    def strip(trace):
        return trace.with_nodes([n.replace(attrs=tuple(a for a in n.attrs if a.name != "stream")) for n in trace.nodes])

    return traceset.with_traces({r: strip(t) for r, t in traceset.items()}, traceset.process_groups)


def encoded(traceset):
    """``traceset`` with every rank encoded and read back (so transforms see records, as from files)."""
    from tracekit.io import encode_trace, trace_from_bytes

    return traceset.with_traces(
        {r: trace_from_bytes(encode_trace(t), rank=r) for r, t in traceset.items()}, traceset.process_groups
    )


def input_paths(name: str) -> list[Path] | None:
    """The files of input ``name`` sorted by rank, or None when its directory is absent."""
    where, pattern = INPUTS[name]
    base = ROOT / "sample_traces" if where == "samples" else REAL
    if not base.is_dir():
        return None
    paths = sorted(base.glob(pattern), key=lambda p: (len(p.name), p.name))
    return paths or None


def digest(traceset) -> str:
    """sha256 of the canonical encoding of every rank (see module docstring)."""
    from tracekit.wire.codec import metadata_to_pb, node_to_pb

    h = hashlib.sha256()
    for rank, trace in traceset.items():
        h.update(f"rank {rank}\n".encode())
        h.update(metadata_to_pb(trace.metadata).SerializeToString(deterministic=True))
        for node in trace.nodes:
            rec = node_to_pb(node).SerializeToString(deterministic=True)
            h.update(len(rec).to_bytes(4, "little") + rec)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def load(input_name: str):
    """Input ``input_name`` as a TraceSet of encoded traces (cached: transforms never change their input)."""
    from tracekit.io import read_traceset

    if input_name == "generated_llm":
        return encoded(generated_llm())
    paths = input_paths(input_name)
    return None if paths is None else read_traceset([str(p) for p in paths])


@functools.lru_cache(maxsize=None)
def _input_sha(input_name: str) -> str:
    """sha256 of the input's file bytes (rank order): two names for the same bytes get the same key."""
    if input_name == "generated_llm":
        return input_name
    h = hashlib.sha256()
    for path in input_paths(input_name) or ():
        h.update(path.read_bytes())
    return h.hexdigest()


_DIGESTS: dict[tuple[str, str], str] = {}


def run_case(input_name: str, case: str, apply: Callable | None = None) -> str | None:
    """Digest of transform ``case`` applied to input ``input_name`` (None when the input is absent).

    Without ``apply``, a case already run on the same bytes under another input name (real_feeder is
    byte-identical to sample_feeder) gives that run's digest instead of repeating the transform.
    """
    ts = load(input_name)
    if ts is None:
        return None
    key = (_input_sha(input_name), case)
    if apply is None and key in _DIGESTS:
        return _DIGESTS[key]
    tr = transforms()[case]
    try:
        out = (apply or tr.apply)(ts)
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare too
        # errors name the file: relative to the checkout, so the expected text is the same in every clone
        return f"error {type(exc).__name__}: {str(exc).replace(str(ROOT) + '/', '')}"
    result = digest(out)
    if apply is None:
        _DIGESTS[key] = result
    return result


def main(argv: list[str]) -> None:
    results: dict[str, dict[str, str]] = {}
    for input_name in [*INPUTS, "generated_llm"]:
        for case in transforms():
            d = run_case(input_name, case)
            if d is not None:
                results.setdefault(input_name, {})[case] = d
                print(input_name, case, d[:16], flush=True)
    if "--write" in argv:
        EXPECTED.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(sys.argv)
