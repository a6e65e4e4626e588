"""Running independent work items in parallel: local process pool by default, Ray on request.

Used for per-rank conversion, validation and transforms of large jobs and for
replay sweeps.  No cluster code of our own: the local executor is
:class:`concurrent.futures.ProcessPoolExecutor`; ``executor="ray"`` submits the
same function as Ray tasks (``ray`` is an optional extra: ``pip install
tracekit[ray]``), to a running cluster at ``ray_address`` or to a local
instance Ray starts.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable, Sequence, TypeVar

from tracekit.errors import ConfigError, TracekitError

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("process", "serial", "ray")


def default_workers() -> int:
    """Worker processes used when none is asked for: the CPU count, between 1 and 8."""
    return max(1, min(os.cpu_count() or 1, 8))


def parallel_map(
    fn: Callable[[T], R],
    items: Sequence[T] | Iterable[T],
    *,
    executor: str = "process",
    max_workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[R]:
    """Apply ``fn`` to every item, in parallel; results in input order.

    Args:
        fn: a picklable top-level function of one argument.
        items: the work items (picklable).
        executor: ``"process"`` (local pool), ``"serial"`` (this process) or
            ``"ray"``.
        max_workers: pool size for ``"process"`` (default: CPU count, at most 8).
        ray_address: address of a running Ray cluster (``"auto"``, ``"ray://host:10001"``);
            None starts or joins a local instance.
        progress: called as ``progress(done, total)`` after each item.

    Raises:
        ConfigError: unknown executor, or Ray requested but not installed.
        Exception: the first exception raised by ``fn`` is re-raised
            unchanged (TracekitError keeps its one-line message).
    """
    items = list(items)
    total = len(items)
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    workers = max_workers or default_workers()
    if executor == "ray":  # even for one item: an explicit request for Ray must not silently run locally
        return _ray_map(fn, items, ray_address, progress)
    if executor == "serial" or total <= 1 or workers == 1:
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if progress:
                progress(i + 1, total)
        return out
    results: list[Any] = [None] * total
    with ProcessPoolExecutor(max_workers=min(workers, total)) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        from concurrent.futures import as_completed

        done = 0
        try:
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                done += 1
                if progress:
                    progress(done, total)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return results


def _ray_map(
    fn: Callable[[T], R], items: list[T], address: str | None, progress: Callable[[int, int], None] | None
) -> list[R]:
    started = ray_init(address)  # refuses first when Ray is not installed
    import ray

    try:
        remote = ray.remote(fn)
        refs = [remote.remote(item) for item in items]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(items)
        pending = list(refs)
        done = 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    results[index[ref]] = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # re-raise our own errors as they were raised
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, TracekitError):
                        raise cause from None
                    raise
                done += 1
                if progress:
                    progress(done, len(items))
        return results
    finally:
        if started:
            ray.shutdown()


def ray_init(address: str | None) -> bool:
    """Start Ray, or join the cluster at ``address``, unless this process already did; True when this call
    started a local instance (the caller shuts it down).

    Raises:
        ConfigError: Ray is not installed, or ``address`` answers no connection (:func:`_check_ray_address`).
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("executor 'ray' needs Ray: pip install 'tracekit[ray]'") from None
    if ray.is_initialized():
        return False
    _check_ray_address(address)
    import logging

    if logging.getLogger().getEffectiveLevel() > logging.INFO:  # Ray's notices only with -v (its own handler)
        logging.getLogger("ray").setLevel(logging.ERROR)
    ray.init(
        address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, configure_logging=False
    )
    return address is None


def _check_ray_address(address: str | None) -> None:
    """Refuse at once a ``HOST:PORT`` address nothing listens on (ray.init retries such an address for minutes).

    ``auto``, ``local`` and ``ray://`` client addresses are left to Ray.

    Raises:
        ConfigError: naming ``--address`` and the connection error.
    """
    import socket

    if address is None or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            return
    except ValueError:
        raise ConfigError(f"--address {address}: expected HOST:PORT of a Ray cluster's head") from None
    except OSError as exc:
        raise ConfigError(
            f"--address {address}: no Ray cluster answers there ({exc.strerror or exc}); start one with "
            "'ray start --head' or leave --address out to start a local one"
        ) from None
