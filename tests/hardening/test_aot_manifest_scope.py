"""Issue 32, kind 6: the ahead-of-time manifest maps a kernel only to tracekit's own exports of that kernel.

The trial swapped two kernels' entries in ``tracekit/_aot_kernels.json`` (and named other importable functions):
the manifest was trusted, so `validate` called another kernel's machine code with the wrong arguments and
segfaulted. A kernel's export must be ``<kernel with dots as _>__<n>`` in ``tracekit._aot_kernels_<k>``.
"""

from __future__ import annotations

import json

import pytest

from tracekit import _aot

WALK = "tracekit.wire.kernels.walk_nodes"


@pytest.mark.parametrize(
    ("module", "symbol", "own"),
    [
        ("tracekit._aot_kernels_0", "tracekit_wire_kernels_walk_nodes__3", True),
        ("tracekit._aot_kernels_1", "tracekit_wire_kernels_walk_nodes__0", True),
        ("tracekit._aot_kernels_0", "tracekit_wire_framing_frame_offsets__0", False),  # another kernel's export
        ("os", "system", False),  # any importable function
        ("tracekit._aot_kernels_0.x", "tracekit_wire_kernels_walk_nodes__0", False),
        ("tracekit._aot_kernels_0", "tracekit_wire_kernels_walk_nodes__x", False),
        ("tracekit._aot_kernels_0", "tracekit_wire_kernels_walk_nodes", False),
        (None, "tracekit_wire_kernels_walk_nodes__0", False),
    ],
)
def test_only_tracekits_own_export_of_the_kernel_counts(module, symbol, own):
    assert _aot.own_export(WALK, module, symbol) is own


def test_a_manifest_naming_another_function_gives_no_exports(tmp_path, monkeypatch):
    sources = {"tracekit.wire.kernels": _aot._module_hash("tracekit.wire.kernels")}
    entry = {"sources": sources, "exports": [[["int64"], "os", "getpid"]]}
    path = tmp_path / "_aot_kernels.json"
    path.write_text(json.dumps({"format": _aot.FORMAT, "host": _aot.host(), "kernels": {WALK: entry}}))
    monkeypatch.setattr(_aot, "MANIFEST", path)
    monkeypatch.setattr(_aot, "_manifest", None)
    monkeypatch.setattr(_aot, "_manifest_read", False)
    assert _aot.exports_of(WALK) == {}
