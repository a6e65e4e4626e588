"""Converters into Chakra trace sets (one ``ExecutionTrace`` per rank).

* :mod:`.pytorch` -- PyTorch Execution Trace (+ Kineto) and Kineto-only traces;
* :mod:`.text_workload` -- ASTRA-sim text workload files;
* :mod:`.generators` -- synthetic traces (microbenchmarks, transformer LLMs, DLRM).

Bad input raises a :class:`~tracekit.errors.TracekitError` subclass naming the file (see each module).
"""
