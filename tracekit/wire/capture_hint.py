"""Recognise a PyTorch profiler capture given where a Chakra trace is expected, and say how to convert it.

A fresh user passes ``et_rank0.json`` or ``kineto_rank0.json`` (what ``tracekit.capture`` and the PyTorch profiler
write) to ``info``/``replay``/``validate``; the readers then only knew the file is not one of their JSON forms.
The two PyTorch forms are told apart by their top-level keys: an Execution Trace has ``schema`` and ``nodes``
(PyTorch's ``ExecutionTraceObserver``), a Kineto trace ``traceEvents`` (Chrome trace event format).  The hint is
the ``tracekit convert pytorch`` command for the file's rank set, with the partner files of the other kind when they
lie beside it (``et_rank<r>.json`` / ``kineto_rank<r>.json``, ``tracekit.capture``'s names).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_LAST_NUMBER = re.compile(r"\d+(?=\D*$)")
_PARTNER = {"et_": "kineto_", "kineto_": "et_"}


def pytorch_kind(doc: Any) -> str | None:
    """``"et"`` for a PyTorch Execution Trace document, ``"kineto"`` for a Kineto trace, else None."""
    if not isinstance(doc, dict):
        return None
    if "schema" in doc and isinstance(doc.get("nodes"), list):
        return "et"
    if isinstance(doc.get("traceEvents"), list):
        return "kineto"
    return None


def _rank_glob(path: Path) -> str:
    """``path`` with its last number replaced by ``*`` (``d/et_rank0.json`` -> ``d/et_rank*.json``)."""
    return str(path.with_name(_LAST_NUMBER.sub("*", path.name, count=1)))


def convert_hint(kind: str, path: str, doc: Any = None) -> str:
    """The one-line explanation for a PyTorch capture of ``kind`` (``et`` or ``kineto``) read as a Chakra trace.

    Returns:
        ``"a PyTorch Execution Trace JSON (schema '...'), not a Chakra trace: convert the capture first: tracekit
        convert pytorch --et '<glob>' [--kineto '<glob>'] -o out/job"`` (or the Kineto form).
    """
    p = Path(path)
    globs = {kind: _rank_glob(p)}
    for prefix, other in _PARTNER.items():
        if p.name.startswith(prefix):
            partner = p.with_name(other + p.name[len(prefix) :])
            if partner.is_file():
                globs["kineto" if kind == "et" else "et"] = _rank_glob(partner)
    options = " ".join(f"--{k} '{globs[k]}'" for k in ("et", "kineto") if k in globs)
    if kind == "et":
        schema = doc.get("schema") if isinstance(doc, dict) else None
        what = "a PyTorch Execution Trace JSON" + (f" (schema {schema!r})" if isinstance(schema, str) else "")
    else:
        what = "a Kineto (PyTorch profiler) trace JSON"
    return f"{what}, not a Chakra trace: convert the capture first: tracekit convert pytorch {options} -o out/job"


def sniff_pytorch_file(path: Path, head_bytes: int = 1 << 16) -> str | None:
    """``"et"``/``"kineto"`` when the first ``head_bytes`` of a ``.json`` or ``.json.gz`` file look like a PyTorch
    capture, else None (a cheap look for readers that refuse a file before parsing it)."""
    import gzip
    import zlib

    if not path.name.endswith((".json", ".json.gz")):
        return None
    try:
        with open(path, "rb") as raw:
            head = raw.read(head_bytes)
            if head[:2] == b"\x1f\x8b":
                raw.seek(0)
                with gzip.open(raw) as fh:
                    head = fh.read(head_bytes)
    except (OSError, EOFError, zlib.error):
        return None
    if re.match(rb'\s*\{\s*"schema"\s*:', head) and b'"nodes"' in head:
        return "et"
    if b'"traceEvents"' in head or re.match(rb'\s*\{\s*"schemaVersion"\s*:', head):
        return "kineto"
    return None
