"""Chakra's own PyTorch converter and linker (mlc-chakra 1.0.0) on the real captures, against tracekit's conversion.

``chakra_converter PyTorch`` turns a PyTorch Execution Trace (ET JSON) into a Chakra ``.et``; ``chakra_trace_link``
first merges the Kineto trace of the same run into the ET. Both run on every capture in ``../shared/real/pytorch``
(the compressed ones unpacked first, since Chakra opens plain JSON only); tracekit converts the same ET files with
:func:`convert_rank` (no Kineto, as Chakra's converter gets them) and the node and collective counts are compared
capture by capture. What Chakra's tools cannot do is asserted as fact with their error, so that a new release that
can is noticed:

- ``chakra_converter`` refuses the ET schema ``1.0.1`` (hta-simple-add, param-linear, the 8 ranks of param-dlrm):
  its supported list starts at ``1.0.2-chakra.0.0.4``.
- ``chakra_trace_link`` does not start at all: it imports ``et_replay`` (facebookresearch/param), which is not on
  the package index, so no capture can be linked where only PyPI is reachable.

Where both convert, the counts differ by rule, and the rule is asserted: Chakra keeps the profiler's thread root
nodes and every host op of a collective (``record_param_comms``, ``nccl:*`` and gloo's ``gloo:*`` record functions)
as COMP nodes and writes no COMM node at all, since its COMM nodes come from the GPU kernels only
``chakra_trace_link`` adds; tracekit drops the thread roots, makes each collective one COMM node, and names the
process-group node ``process_group:init`` (Chakra keeps the ET's ``## process_group:init ##``).
"""

from __future__ import annotations

import gzip
import shutil
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from reference_tools import chakra_facts, chakra_script, chakra_side
from tracekit.converters.pytorch import convert_rank
from tracekit.model import CollectiveType, NodeType

pytestmark = pytest.mark.realdata

UNSUPPORTED_1_0_1 = (
    "ValueError: Unsupported schema version '1.0.1'. Please check if the schema version is in the list of supported "
    "versions: ['1.0.2-chakra.0.0.4', '1.0.3-chakra.0.0.4', '1.1.0-chakra.0.0.4', '1.1.1-chakra.0.0.4', "
    "'1.1.1-chakra.1.0.0']."
)
NO_ET_REPLAY = (
    "ImportError: Failed to import et_replay. et_replay is required but not packaged because it is not available as "
    "a PyPi package."
)
GLOO = "torch-cpu-gloo"
THREAD = "[pytorch|profiler|execution_trace|thread]"  # the profiler's root node of each thread
PG = "## process_group:init ##"
# capture -> [(ET, Kineto or None) per rank], paths under ../shared/real/pytorch ("tar.gz:member" for an archive)
CAPTURES: dict[str, list[tuple[str, str | None]]] = {
    "chakra-allgather-2rank": [("chakra-allgather-2rank/1.0.2-chakra.0.0.4.json", None)],
    f"{GLOO}/single": [(f"{GLOO}/single/et_rank0.json", f"{GLOO}/single/kineto_rank0.json")],
    **{
        f"{GLOO}/dist_ws{n}": [
            (f"{GLOO}/dist_ws{n}/et_rank{r}.json", f"{GLOO}/dist_ws{n}/kineto_rank{r}.json") for r in range(n)
        ]
        for n in (2, 4)
    },
    "hta-simple-add": [
        ("hta-simple-add/benchmark_simple_add_et.json.gz", "hta-simple-add/benchmark_simple_add_trace.json.gz")
    ],
    "param-linear": [("param-linear/linear_et.json.gz", "param-linear/linear_kineto.json.gz")],
    "param-resnet": [("param-resnet/resnet_et.json.gz", "param-resnet/resnet_kineto.json.gz")],
    "param-resnet-1gpu": [("param-resnet-1gpu/resnet_1gpu_et.json.gz", None)],
    "param-resnet-2gpu": [("param-resnet-2gpu/resnet_2gpu_et.json.gz", None)],
    "param-hf-gpt2": [("param-hf-gpt2/hf_GPT2_et.json.tar.gz:hf_GPT2_et.json", None)],
    "param-dlrm": [
        (
            f"param-dlrm/dlrm_pytorch_et.tar.gz:dlrm_pytorch_et/dlrm_eg_{r}.json",
            f"param-dlrm/dlrm_kineto.tar.gz:dlrm_kineto/worker{r}_step_12.*.pt.trace.json",
        )
        for r in range(8)
    ],
}


@pytest.fixture(autouse=True, scope="module")
def _chakra_installed():
    """Skip the module at once, before any input is prepared, when Chakra is not installed."""
    chakra_facts()


def _plain(real: Path, spec: str, dest: Path) -> Path:
    """The file ``spec`` names as plain JSON: itself, gunzipped, or its member of a ``.tar.gz`` (a glob)."""
    if ".tar.gz:" in spec:
        archive, member = spec.split(":")
        with tarfile.open(real / archive) as tar:
            (info,) = [m for m in tar.getmembers() if Path(m.name).match(member)]
            tar.extractall(dest, members=[info], filter="data")
        return dest / info.name
    if spec.endswith(".gz"):
        out = dest / Path(spec).with_suffix("")
        out.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(real / spec) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        return out
    return real / spec


@pytest.fixture(scope="module")
def inputs(real_dir, tmp_path_factory) -> dict[str, list[tuple[Path, Path | None]]]:
    """Every capture's (ET, Kineto) per rank as plain JSON files."""
    dest = tmp_path_factory.mktemp("captures")
    real = real_dir / "pytorch"
    return {
        name: [(_plain(real, et, dest), _plain(real, k, dest) if k else None) for et, k in ranks]
        for name, ranks in CAPTURES.items()
    }


def _types(counts: dict) -> dict[str, int]:
    return {
        NodeType(int(t)).name.removesuffix("_NODE"): n for t, n in sorted(counts.items(), key=lambda kv: int(kv[0]))
    }


@pytest.fixture(scope="module")
def chakra(inputs, tmp_path_factory) -> dict[str, list]:
    """Per capture and rank: Chakra's error, or (node counts by type, collectives by kind, node names)."""
    out = tmp_path_factory.mktemp("chakra")
    flat = [(name, et) for name, ranks in inputs.items() for et, _ in ranks]
    results = chakra_side("convert", out, *(et for _, et in flat))
    done = [i for i, r in enumerate(results) if r.get("ok")]
    summaries = dict(zip(done, chakra_side("summarize", *(out / f"{i}.et" for i in done))))
    by_capture: dict[str, list] = {name: [] for name in inputs}
    for i, ((name, _), result) in enumerate(zip(flat, results)):
        if "error" in result:
            by_capture[name].append(result["error"])
            continue
        summary = summaries[i]
        comm = {CollectiveType(int(k)).name: n for k, n in summary["comm_types"].items()}
        by_capture[name].append((_types(summary["types"]), comm, Counter(summary["names"])))
    return by_capture


@pytest.fixture(scope="module")
def ours(inputs) -> dict[str, list]:
    """Per capture and rank: tracekit's (node counts by type, collectives by kind, node names) of the same ET."""
    out: dict[str, list] = {}
    for name, ranks in inputs.items():
        out[name] = []
        for rank, (et, _) in enumerate(ranks):
            res = convert_rank(et, None, rank=rank)
            types = _types({int(NodeType[k]): v for k, v in res.node_counts.items()})
            out[name].append((types, dict(sorted(res.comm_counts.items())), Counter(n.name for n in res.trace.nodes)))
    return out


GLOO_COLLECTIVES = {
    "ALL_GATHER": 2,
    "ALL_REDUCE": 2,
    "ALL_TO_ALL": 1,
    "BARRIER": 1,
    "BROADCAST": 1,
    "REDUCE_SCATTER": 2,
}
RESNET_COLLECTIVES = {"ALL_REDUCE": 15, "BROADCAST": 6}  # shared/real/README.md: 5 buckets x 3 steps, 6 broadcasts
RESNET_HOST_OPS = {"record_param_comms": 21, "nccl:all_reduce": 15, "nccl:broadcast": 6}


def _gloo(ws: int, rank: int) -> tuple:
    """dist_ws{ws}: (Chakra's nodes, tracekit's nodes, tracekit's collectives, names only Chakra has) of ``rank``."""
    p2p, op = ("SEND", "send") if rank % 2 == 0 else ("RECV", "recv")
    ours = {"METADATA": 1, "COMP": 311 if ws == 2 else 349, f"COMM_{p2p}": 1, "COMM_COLL": 9}
    gloo_ops = {"all_reduce": 5 if ws == 2 else 7, "all_gather": 2, "broadcast": 1, "all_to_all": 1, "barrier": 1}
    extra = {THREAD: 3, PG: 1, f"gloo:{op}": 1, **{f"gloo:{k}": v for k, v in gloo_ops.items()}}
    return {"METADATA": 1, "COMP": 335 if ws == 2 else 375}, ours, {**GLOO_COLLECTIVES, p2p: 1}, extra


# capture -> per rank: (Chakra's nodes by type, tracekit's nodes by type, tracekit's collectives, the node names
# only Chakra's output has); Chakra's output has no collective on any capture. Only name tracekit's output has that
# Chakra's lacks: "process_group:init", where tracekit writes a METADATA node.
CONVERTED = {
    "chakra-allgather-2rank": [
        (
            {"METADATA": 1, "COMP": 261},
            {"METADATA": 1, "COMP": 230, "COMM_COLL": 10},
            {"ALL_GATHER": 10},
            {THREAD: 1, PG: 1, "record_param_comms": 10, "nccl:all_gather": 10},
        )
    ],
    f"{GLOO}/single": [({"COMP": 166}, {"COMP": 165}, {}, {THREAD: 1})],
    f"{GLOO}/dist_ws2": [_gloo(2, r) for r in range(2)],
    f"{GLOO}/dist_ws4": [_gloo(4, r) for r in range(4)],
    **{
        f"param-resnet{suffix}": [
            (
                {"METADATA": 1, "COMP": 14_390} if pg else {"COMP": 14_390},
                {"METADATA": 1, "COMP": 14_325, "COMM_COLL": 21},
                RESNET_COLLECTIVES,
                {THREAD: 2, **({PG: 1} if pg else {}), **RESNET_HOST_OPS},
            )
        ]
        for suffix, pg in (("", True), ("-1gpu", False), ("-2gpu", True))  # the 1-GPU ET has no process-group node
    },
    "param-hf-gpt2": [({"COMP": 27_155}, {"COMP": 27_153}, {}, {THREAD: 2})],
}
# capture -> tracekit's (nodes by type, collectives) of every rank, where Chakra's converter refuses the schema
REFUSED = {
    "hta-simple-add": [({"COMP": 36}, {})],
    "param-linear": [({"COMP": 928}, {})],
    # shared/real/README.md: per rank 5 all_to_all (one uneven all_to_allv) + 3 all_reduce
    "param-dlrm": [({"METADATA": 1, "COMP": 1_648, "COMM_COLL": 8}, {"ALL_REDUCE": 3, "ALL_TO_ALL": 5})] * 8,
}


def test_every_real_capture_is_listed():
    assert sorted(CAPTURES) == sorted([*CONVERTED, *REFUSED])


def test_chakra_converter_vs_ours_node_and_collective_counts(chakra, ours):
    for name, expected in CONVERTED.items():
        assert len(chakra[name]) == len(ours[name]) == len(expected), name
        for rank, ((c_types, c_comm, c_names), (o_types, o_comm, o_names), facts) in enumerate(
            zip(chakra[name], ours[name], expected)
        ):
            chakra_types, our_types, our_comm, only_chakra = facts
            assert (c_types, c_comm) == (chakra_types, {}), (name, rank)
            assert (o_types, o_comm) == (our_types, our_comm), (name, rank)
            # the rule that reconciles the counts: what only one side has, by node name
            assert dict(c_names - o_names) == only_chakra, (name, rank)
            assert dict(o_names - c_names) == ({"process_group:init": 1} if "METADATA" in our_types else {})


def test_chakra_converter_refuses_the_1_0_1_schema_that_we_convert(chakra, ours):
    for name, expected in REFUSED.items():
        assert len(chakra[name]) == len(expected), name
        for error in chakra[name]:
            assert error.startswith(UNSUPPORTED_1_0_1), (name, error)
        assert [(types, comm) for types, comm, _ in ours[name]] == expected, name


def test_chakra_trace_link_cannot_start_without_et_replay(inputs, tmp_path):
    # one call per capture that has a Kineto trace (rank 0): each fails before reading its arguments
    pairs = {name: ranks[0] for name, ranks in inputs.items() if ranks[0][1] is not None}
    assert sorted(pairs) == sorted(["hta-simple-add", "param-linear", "param-resnet", "param-dlrm"] + 
                                   [f"{GLOO}/{c}" for c in ("single", "dist_ws2", "dist_ws4")])  # fmt: skip
    for name, (et, kineto) in pairs.items():
        out = tmp_path / f"{name.replace('/', '-')}.json"
        args = ["--rank", "0", "--chakra-host-trace", et, "--chakra-device-trace", kineto, "--output-file", out]
        proc = chakra_script("chakra_trace_link", *args)
        assert proc.returncode == 1 and NO_ET_REPLAY in proc.stderr, (name, proc.stderr[-500:])
        assert not out.exists()
