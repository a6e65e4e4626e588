"""Checks and counts of traces and trace sets: what ``validate`` and ``info`` report.

Validation (:mod:`tracekit.checks.validate`, per-rank checks in :mod:`tracekit.checks.rank_checks`, findings in
:mod:`tracekit.checks.report`), summaries (:mod:`tracekit.checks.summary`) and the class-by-class checks of a
rank-class set (:mod:`tracekit.checks.classset`). Uses :mod:`tracekit.sets`, :mod:`tracekit.wire`,
:mod:`tracekit.model`.
"""
