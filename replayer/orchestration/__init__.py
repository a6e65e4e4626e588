"""Orchestration: many replays or a replay with a rewrite in front: sweeps (:mod:`.sweep`), nccl-tests style
collective benchmarks (:mod:`.bench_coll`), replay with projected compute (:mod:`.projected`)."""
