"""Capturing a linkable PyTorch Execution Trace + Kineto trace pair from a user's script.

The usual failure when people capture traces by hand is an unlinkable pair: the
ET observer and the profiler cover different steps, the Kineto trace has no
``Record function id`` (the observer was not running while the profiler
recorded), or ranks overwrite each other's files.  :func:`capture` runs both
over exactly the code inside one ``with`` block, so every ET op's ``rf_id``
appears as ``Record function id`` in the Kineto trace::

    from tracekit.capture import capture

    for step, batch in enumerate(loader):
        if step == 3:                     # after warm-up
            with capture("traces/") as cap:
                train_step(batch)
            print(cap.et_path, cap.kineto_path)
        else:
            train_step(batch)

Files are named by the ``torch.distributed`` rank (``et_rank{r}.json``,
``kineto_rank{r}.json``), written under temporary names and renamed when the
block finishes, so a failed step leaves no half-written pair.  Mechanism:
``torch.profiler.profile(execution_trace_observer=ExecutionTraceObserver())``
(PyTorch >= 2.4; "Execution Trace" in the PyTorch profiler docs), which
starts and stops the observer together with the profiler's recording.

With ``profile_memory`` (the default) the profiler also records every allocation and free (``[memory]``
events, PyTorch profiler ``profile_memory=True``).  On CPU those events count only what is allocated while
profiling, so the capture measures what was already alive when the block began (the storages of every
reachable tensor and of their ``.grad``: parameters, gradients, optimizer state) and writes it into the
Kineto JSON as ``tracekitMemory: {"baseline_allocated_bytes": {"cpu": N}}`` (a top-level key other readers
ignore; CUDA totals are the caching allocator's own and need none).  The converters and ``tracekit
analyze`` add it to the peak (:mod:`tracekit.converters.pytorch.kineto_memory`).

Torch is imported inside :func:`capture` only; ``import tracekit.capture`` and
the converters never import it.

Errors: :class:`tracekit.errors.ConfigError` when torch is missing or too old,
or ``out_dir`` cannot be created.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tracekit.errors import ConfigError

__all__ = ["CaptureResult", "capture", "capture_paths"]


@dataclass
class CaptureResult:
    """Where :func:`capture` wrote the pair (filled in when the block exits).

    Attributes:
        rank: the rank the files are named by.
        et_path: the Execution Trace JSON.
        kineto_path: the Kineto (Chrome trace) JSON.
        complete: True once both files are in place.
    """

    rank: int
    et_path: Path
    kineto_path: Path
    complete: bool = False


def capture_paths(out_dir: str | os.PathLike[str], rank: int) -> tuple[Path, Path]:
    """The (ET, Kineto) file paths for ``rank`` under ``out_dir``."""
    out = Path(out_dir)
    return out / f"et_rank{rank}.json", out / f"kineto_rank{rank}.json"


def _current_rank(torch: Any) -> int:
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0


def live_cpu_tensor_bytes(torch: Any) -> int:
    """Bytes of the distinct CPU storages of every tensor the garbage collector can reach, and of their
    ``.grad`` (a parameter's gradient has no Python object of its own until read).

    What a CPU capture adds to the profiler's ``Total Allocated``, which counts only what is allocated while
    profiling.  Storages shared by views count once (keyed by data pointer).
    """
    import gc

    seen: dict[int, int] = {}

    def add(t: Any) -> None:
        if t.device.type != "cpu" or t.is_sparse:
            return
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr:
            seen[ptr] = storage.nbytes()

    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):  # type(): no __class__ lookup on lazy module proxies
            with contextlib.suppress(RuntimeError):  # tensors without storage (meta, functional wrappers)
                add(obj)
                if obj.grad is not None:
                    add(obj.grad)
    return sum(seen.values())


def add_top_level_key(path: Path, key: str, value: Any) -> None:
    """Add ``"key": value`` to the JSON object in ``path`` without parsing the file: the text before its
    closing brace gets ``, "key": value``.

    Raises:
        ConfigError: the file does not end with a JSON object's closing brace.
    """
    import json

    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(size - 64, 0))
        tail = f.read()
        end = tail.rstrip().rfind(b"}")
        if end < 0:
            raise ConfigError("the profiler's trace does not end with a JSON object", path=path)
        f.seek(size - len(tail) + end)
        f.write(b", " + json.dumps(key).encode() + b": " + json.dumps(value).encode() + b"}\n")
        f.truncate()


@contextlib.contextmanager
def capture(
    out_dir: str | os.PathLike[str],
    *,
    rank: int | None = None,
    record_shapes: bool = True,
    with_stack: bool = False,
    cuda: bool | None = None,
    profile_memory: bool = True,
) -> Iterator[CaptureResult]:
    """Record the ET and the Kineto trace of the code inside the block, as one linkable pair.

    Args:
        out_dir: directory for the files (created if missing).
        rank: name files by this rank; default ``torch.distributed.get_rank()`` when a
            process group is initialized, else 0.
        record_shapes: record input shapes in Kineto (the converters use them for
            collective sizes when ``record_param_comms`` does not give one).
        with_stack: record Python stacks in Kineto (bigger files).
        cuda: also record GPU activity; default: when CUDA is available.
        profile_memory: record allocations and frees (``[memory]`` events) and the CPU baseline (module doc).

    Yields:
        a :class:`CaptureResult` whose paths are valid after the block exits.

    Raises:
        ConfigError: torch is not installed, lacks ``ExecutionTraceObserver``, or
            ``out_dir`` cannot be created.
    """
    try:
        import torch
        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile
    except ImportError as exc:
        raise ConfigError(
            f"tracekit.capture needs PyTorch >= 2.4 with torch.profiler (pip install 'tracekit[torch]'): {exc}"
        ) from None
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create capture directory: {exc.strerror or exc}", path=out) from None
    r = _current_rank(torch) if rank is None else int(rank)
    et_path, kineto_path = capture_paths(out, r)
    result = CaptureResult(rank=r, et_path=et_path, kineto_path=kineto_path)
    tmp_et = et_path.with_name(f".{et_path.name}.{os.getpid()}.tmp")
    tmp_kineto = kineto_path.with_name(f".{kineto_path.name}.{os.getpid()}.tmp")

    activities = [ProfilerActivity.CPU]
    if cuda if cuda is not None else torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    observer = ExecutionTraceObserver().register_callback(str(tmp_et))
    ok = False
    baseline = live_cpu_tensor_bytes(torch) if profile_memory else None
    try:
        with profile(
            activities=activities,
            record_shapes=record_shapes,
            with_stack=with_stack,
            profile_memory=profile_memory,
            execution_trace_observer=observer,
        ) as prof:
            yield result
        prof.export_chrome_trace(str(tmp_kineto))
        if baseline is not None:
            add_top_level_key(tmp_kineto, "tracekitMemory", {"baseline_allocated_bytes": {"cpu": baseline}})
        ok = True
    finally:
        with contextlib.suppress(Exception):
            observer.unregister_callback()
        if ok:
            os.replace(tmp_et, et_path)
            os.replace(tmp_kineto, kineto_path)
            result.complete = True
        else:
            for p in (tmp_et, tmp_kineto):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
