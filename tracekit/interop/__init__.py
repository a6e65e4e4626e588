"""Other tools' forms of a trace set: making a set ASTRA-sim-ready (:mod:`tracekit.interop.astra`).

Writing a set writes what it holds (:mod:`tracekit.sets.io`); making it run in ASTRA-sim as it is (process-group
ids, the comm-group file, records ASTRA-sim's feeder needs) is this explicit step, used by the callers that need it
(generators, converters, ``export astra``).
"""
