"""ET reader: every schema layout, structural errors, real files' node counts."""

from __future__ import annotations

import pytest

from _pytorch_synth import et_doc, mlp_et, node, roots
from tracekit.converters.pytorch.et_reader import SUPPORTED_SCHEMAS_TEXT, parse_et, read_et, schema_layout
from tracekit.errors import ConversionError


def flat_node(nid, name, parent, rf, tid=1, inputs=(), shapes=(), types=()):
    return {
        "name": name,
        "id": nid,
        "rf_id": rf,
        "parent": parent,
        "fw_parent": 0,
        "seq_id": -1,
        "scope": 0,
        "tid": tid,
        "fw_tid": 0,
        "op_schema": "",
        "inputs": list(inputs),
        "input_shapes": list(shapes),
        "input_types": list(types),
        "outputs": [],
        "output_shapes": [],
        "output_types": [],
    }


@pytest.mark.parametrize(
    "schema",
    [
        "1.0.2-chakra.0.0.4",
        "1.0.3-chakra.0.0.4",
        "1.1.0-chakra.0.0.4",
        "1.1.1-chakra.0.0.4",
        "1.1.1-chakra.1.0.0",
        "1.2.0-chakra.1.3.7",
    ],
)
def test_nested_schemas_read_the_same_ops(schema):
    et = parse_et(mlp_et() | {"schema": schema}, path="x.json")
    assert et.schema == schema
    assert [o.name for o in et.ops if not o.is_root][:3] == [
        "[pytorch|profiler|execution_trace|thread]",
        "ProfilerStep#1",
        "aten::linear",
    ]
    addmm = et.by_id[13]
    assert (addmm.parent, addmm.rf_id, addmm.tid) == (11, 4, 1)


def test_flat_schema_1_0_1():
    tensor = [5, 6, 0, 8, 4, "cuda:0"]
    doc = {
        "schema": "1.0.1",
        "pid": 1,
        "nodes": [
            flat_node(1, "[pytorch|profiler|execution_trace|process]", 1, 0, tid=0),
            flat_node(2, "aten::add", 1, 7, inputs=[tensor, 1], shapes=[[2, 4], []], types=["Tensor(float)", "Int"]),
        ],
    }
    et = parse_et(doc, path="flat.json")
    op = et.by_id[2]
    assert (op.parent, op.rf_id, op.inputs.values[0], op.inputs.shapes[0]) == (1, 7, tensor, [2, 4])
    assert schema_layout("1.0.1") == "flat"


@pytest.mark.parametrize("schema", ["1.0.0", "2.0.0-chakra.0.0.4", "1.1.1-chakra.0.0.5", None, 3])
def test_unsupported_schema_names_version_and_list(schema):
    with pytest.raises(ConversionError) as exc:
        parse_et(mlp_et() | {"schema": schema}, path="bad.json")
    text = str(exc.value)
    assert repr(schema) in text and SUPPORTED_SCHEMAS_TEXT in text and text.startswith("bad.json: ")


def test_layout_not_matching_schema_is_an_error():
    with pytest.raises(ConversionError, match="promises the flat"):
        parse_et(mlp_et() | {"schema": "1.0.1"}, path="x.json")


def test_missing_parent_is_an_error_naming_node_and_parent():
    doc = et_doc(roots() + [node(10, "aten::mm", 99, 1)])
    with pytest.raises(ConversionError) as exc:
        parse_et(doc, path="x.json")
    assert exc.value.node_id == 10 and "parent id 99" in str(exc.value)


def test_duplicate_ids_and_bad_values():
    with pytest.raises(ConversionError, match="duplicate ET node id 10"):
        parse_et(et_doc(roots() + [node(10, "a", 2, 1), node(10, "b", 2, 2)]), path="x.json")
    bad = node(10, "a", 2, 1)
    bad["attrs"][0]["value"] = float("nan")
    with pytest.raises(ConversionError, match="rf_id must be an integer"):
        parse_et(et_doc(roots() + [bad]), path="x.json")
    with pytest.raises(ConversionError, match="no top-level 'nodes'"):
        parse_et({"traceEvents": []}, path="x.json")


def test_ops_sorted_by_rf_id():
    doc = et_doc(roots() + [node(20, "late", 2, 9), node(10, "early", 2, 3)])
    assert [o.name for o in parse_et(doc, path="x").ops][-2:] == ["early", "late"]


@pytest.mark.parametrize(
    "rel, schema, count",
    [
        ("torch-cpu-gloo/single/et_rank0.json", "1.1.1-chakra.0.0.4", 167),
        ("chakra-allgather-2rank/1.0.2-chakra.0.0.4.json", "1.0.2-chakra.0.0.4", 263),
        ("hta-simple-add/benchmark_simple_add_et.json.gz", "1.0.1", 38),
        ("param-linear/linear_et.json.gz", "1.0.1", 931),
        ("param-resnet-1gpu/resnet_1gpu_et.json.gz", "1.0.3-chakra.0.0.4", 14391),
    ],
)
def test_real_files(real_dir, rel, schema, count):
    et = read_et(real_dir / "pytorch" / rel)
    assert (et.schema, len(et.ops)) == (schema, count)
