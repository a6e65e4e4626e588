"""Runs inside Chakra's own environment (mlc-chakra from PyPI, ``.venv-chakra``), never in tracekit's.

The interop tests (through :mod:`reference_tools`) start it with that venv's Python, so that every file is read,
jsonized or converted by Chakra's code alone, many files in one process:

- ``decode FILE...``: each file through Chakra's ``protolib`` decoder into its ``et_def_pb2`` messages; prints one
  JSON list per file: the metadata version and, per node, the fields the tests compare (see :func:`_node_row`).
- ``summarize FILE...``: per file the node counts by type, the ``comm_type`` values and the node names.
- ``jsonize OUTDIR FILE...``: ``chakra_jsonizer``'s ``main`` with the arguments its console script takes, once per file,
  written to ``OUTDIR/<i>.json``.
- ``convert OUTDIR ET...``: ``chakra_converter PyTorch`` (its ``main``, console-script arguments) once per PyTorch
  ET JSON, written to ``OUTDIR/<i>.et``; prints per file ``{"ok": true}`` or ``{"error": "<Type>: <message>"}``.

Importing tracekit here is not allowed (the point is to see the files through Chakra's eyes only).
"""

from __future__ import annotations

import json
import logging
import sys


def _attr_value(attr):
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(attr, kind)
    if kind.endswith("_list"):
        value = list(value.values)
        return [v.hex() for v in value] if kind == "bytes_list" else value
    return value.hex() if kind == "bytes_val" else value


def _node_row(node) -> list:
    """[id, name, type, data_deps, ctrl_deps, start_time_micros, duration_micros, inputs, outputs, attrs]."""
    io = [[m.values, m.shapes, m.types] for m in (node.inputs, node.outputs)]
    attrs = [[a.name, _attr_value(a)] for a in node.attr]
    return [
        node.id,
        node.name,
        int(node.type),
        list(node.data_deps),
        list(node.ctrl_deps),
        node.start_time_micros,
        node.duration_micros,
        *io,
        attrs,
    ]


def decode(paths: list[str]) -> list:
    """Per file: [metadata version, [node rows]] as Chakra's protolib reads it."""
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    out = []
    for path in paths:
        f = openFileRd(path)
        meta = GlobalMetadata()
        decodeMessage(f, meta)
        rows = []
        node = Node()
        while decodeMessage(f, node):
            rows.append(_node_row(node))
            node = Node()
        f.close()
        out.append([meta.version, rows])
    return out


def summarize(paths: list[str]) -> list:
    """Per file: {"types": {node type: count}, "comm_types": {comm_type: count}, "names": {name: count}}."""
    from collections import Counter

    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    out = []
    for path in paths:
        f = openFileRd(path)
        decodeMessage(f, GlobalMetadata())
        types, comm, names = Counter(), Counter(), Counter()
        node = Node()
        while decodeMessage(f, node):
            types[int(node.type)] += 1
            names[node.name] += 1
            comm.update(a.int64_val for a in node.attr if a.name == "comm_type")
            node = Node()
        f.close()
        out.append({"types": types, "comm_types": comm, "names": names})
    return out


def _run_main(main, argv: list[str]) -> dict:
    saved = sys.argv
    sys.argv = argv
    try:
        main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            return {"error": f"SystemExit: {exc.code}"}
    except Exception as exc:  # noqa: BLE001 - Chakra's own error, reported to the test as a fact about the file
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        sys.argv = saved
    return {"ok": True}


def jsonize(outdir: str, paths: list[str]) -> list:
    """``chakra_jsonizer --input_filename F --output_filename OUTDIR/<i>.json`` for each file."""
    from chakra.src.jsonizer.jsonizer import main

    return [
        _run_main(main, ["chakra_jsonizer", "--input_filename", path, "--output_filename", f"{outdir}/{i}.json"])
        for i, path in enumerate(paths)
    ]


def convert(outdir: str, paths: list[str]) -> list:
    """``chakra_converter --log-filename OUTDIR/<i>.log PyTorch --input ET --output OUTDIR/<i>.et`` for each file."""
    from chakra.src.converter.converter import main

    logging.disable(logging.DEBUG)  # its main logs every node at DEBUG into the log file (a sixth of its time)
    results = []
    for i, path in enumerate(paths):
        argv = [
            "chakra_converter",
            "--log-filename",
            f"{outdir}/{i}.log",
            "PyTorch",
            "--input",
            path,
            "--output",
            f"{outdir}/{i}.et",
        ]
        results.append(_run_main(main, argv))
        logging.getLogger().handlers.clear()  # its main adds handlers each call (logging.basicConfig)
    return results


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "decode":
        result = decode(rest)
    elif command == "summarize":
        result = summarize(rest)
    elif command == "jsonize":
        result = jsonize(rest[0], rest[1:])
    elif command == "convert":
        result = convert(rest[0], rest[1:])
    else:
        raise SystemExit(f"unknown command {command!r}")
    json.dump(result, sys.stdout)
