"""Results: what a replay found, as values (:mod:`.result`), and measured-vs-replayed comparisons
(:mod:`.measured`). Never imports :mod:`tracekit.replayer.reporting` (tests/core/test_layers.py)."""
