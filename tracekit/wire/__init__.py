"""The Chakra ET wire format: everything that knows protobuf bytes and trace file formats.

One trace file is read and written by :mod:`tracekit.wire.io` (``.et``, ``.et.gz``, tracekit JSON, Chakra feeder
JSON). Below it: record framing and decompression (:mod:`~tracekit.wire.framing`), model <-> protobuf messages
(:mod:`~tracekit.wire.codec`), column-wise decoding (:mod:`~tracekit.wire.columnar`,
:mod:`~tracekit.wire.attrsource`) and the lazy node view over it (:mod:`~tracekit.wire.nodeview`), compiled
read loops (:mod:`~tracekit.wire.kernels`, private helpers ``_prim``, ``_attrwire``, ``_names``), compiled writers
and record scans (:mod:`~tracekit.wire.encode`, :mod:`~tracekit.wire.batch`, :mod:`~tracekit.wire.recscan`,
:mod:`~tracekit.wire.spliced`), streaming reads (:mod:`~tracekit.wire.stream`), the JSON form
(:mod:`~tracekit.wire.jsonform`) and the PyTorch-capture sniffing of a wrong input
(:mod:`~tracekit.wire.capture_hint`). Uses :mod:`tracekit.model`; never a trace set, a check or a transform.
"""
