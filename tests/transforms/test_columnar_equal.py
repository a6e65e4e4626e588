"""The columnar transforms give the same traces as the per-node object path did (issue 17).

Expected digests were computed with the object path before the columnar one
existed (see ``columnar_cases.py``); a digest matches exactly when the output
decodes to equal traces (every node field and attribute, rank and metadata).
"""

from __future__ import annotations

import json

import pytest
from columnar_cases import EXPECTED, INPUTS, run_case, transforms

CASES = json.loads(EXPECTED.read_text())
_SLOW = {"real_resnet", "real_feeder"}  # the same file as sample_feeder / 6 MB: a few cases only
_FEW = {"scale_compute_2", "scale_comm_2", "compact", "drop_cpu_ops", "retarget_a100_h100"}


def _params():
    for input_name in [*INPUTS, "generated_llm"]:
        for case in transforms():
            if input_name in _SLOW and case not in _FEW:
                continue
            yield pytest.param(input_name, case, id=f"{input_name}-{case}")


@pytest.mark.parametrize("input_name,case", list(_params()))
def test_same_output_as_object_path(input_name, case, request):
    if input_name.startswith("real_"):
        request.getfixturevalue("real_dir")  # skips with a reason when ../shared/real is absent
    if input_name == "generated_llm":
        pytest.importorskip("tracekit.converters.generators.llm")
    expected = CASES.get(input_name, {}).get(case)
    if expected is None:
        pytest.skip(f"no expected digest recorded for {input_name}/{case}")
    assert run_case(input_name, case) == expected


_NODE_PATH = [("sample_feeder", c) for c in ("compact", "drop_cpu_ops", "remove_pattern", "scale_comm_2")] + [
    ("generated_llm", c) for c in ("compact", "scale_compute_2", "rescale_strong_4")
]


@pytest.mark.parametrize("input_name,case", _NODE_PATH, ids=[f"{i}-{c}" for i, c in _NODE_PATH])
def test_node_path_still_gives_the_recorded_output(input_name, case):
    """Traces built in memory take the per-node path (now with Node.replace): same digests as before."""
    from columnar_cases import load

    if input_name == "generated_llm":
        pytest.importorskip("tracekit.converters.generators.llm")

    def on_nodes(ts):
        decoded = ts.with_traces({r: t.with_nodes(list(t.nodes)) for r, t in ts.items()}, ts.process_groups)
        return transforms()[case].apply(decoded)

    if load(input_name) is None:
        pytest.skip(f"input {input_name} is absent")
    assert run_case(input_name, case, apply=on_nodes) == CASES[input_name][case]
