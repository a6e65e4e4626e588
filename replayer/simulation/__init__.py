"""Simulation: hardware specs, cost models, compiling a trace set, the event engine, rank folding.

Modules: :mod:`.hardware` / :mod:`.spec_toml` / :mod:`.astra_config` (specs, presets), :mod:`.placement`,
:mod:`.collectives` / :mod:`.astra_model` / :mod:`.astra_algorithms` / :mod:`.astra_skew` / :mod:`.nccl_model`
(communication costs), :mod:`.compute` (compute costs), :mod:`.checks` (up-front checks), :mod:`.program`
(compiling a trace set), :mod:`.engine` (the simulation), :mod:`.deadlock` (stall reports), :mod:`.folding` /
:mod:`.fold_expand` / :mod:`.class_replay` (one representative per class of identical ranks), :mod:`.run` (the
``replay`` facade). Never imports :mod:`tracekit.replayer.reporting` (tests/core/test_layers.py).
"""
