"""Running simulations one at a time as slots free up, so a search can decide what to submit next.

:func:`tracekit.parallel.parallel_map` takes all its items up front; a branch-and-bound search wants to look at
the best time found so far before it starts the next candidate.  :class:`TaskPool` offers ``submit`` and
``next_done`` over the same three executors: ``serial`` (this process), ``process``
(:class:`concurrent.futures.ProcessPoolExecutor`) and ``ray`` (Ray tasks; a running cluster at ``address`` or a
local instance Ray starts and this pool stops).
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable

from tracekit.errors import ConfigError, TracekitError


class TaskPool:
    """``slots`` concurrent calls of one function (module doc); a context manager.

    Raises:
        ConfigError: an unknown executor, or Ray asked for and not installed.
    """

    def __init__(self, fn: Callable[[Any], Any], executor: str, slots: int, address: str | None = None) -> None:
        from tracekit.parallel import EXECUTORS

        if executor not in EXECUTORS:
            raise ConfigError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
        self.fn, self.executor = fn, executor
        self.slots = 1 if executor == "serial" else max(1, slots)
        self._pending: dict[Any, Any] = {}  # handle -> key
        self.last_key: Any = None  # the key of the task next_done last returned or raised for
        self._done: list[tuple[Any, Any]] = []  # serial results not yet collected
        self._pool: ProcessPoolExecutor | None = None
        self._ray_started = False
        if executor == "process":
            self._pool = ProcessPoolExecutor(max_workers=self.slots)
        elif executor == "ray":
            self._remote = self._ray_remote(address)

    def _ray_remote(self, address: str | None) -> Any:
        from tracekit.parallel import ray_init

        self._ray_started = ray_init(address)  # joins or starts Ray as the sweep does (ConfigError without Ray)
        import ray

        return ray.remote(self.fn)

    @property
    def free(self) -> int:
        """Slots without a running task."""
        return self.slots - len(self._pending) - len(self._done)

    @property
    def busy(self) -> bool:
        """Whether a task is running or a result is waiting to be collected."""
        return bool(self._pending or self._done)

    def submit(self, key: Any, item: Any) -> None:
        """Start ``fn(item)``; :meth:`next_done` returns it with ``key`` (serial: runs it now; an error names
        ``key`` through :attr:`last_key`)."""
        if self.executor == "serial":
            self.last_key = key
            self._done.append((key, self.fn(item)))
        elif self._pool is not None:
            self._pending[self._pool.submit(self.fn, item)] = key
        else:
            self._pending[self._remote.remote(item)] = key

    def next_done(self) -> tuple[Any, Any]:
        """``(key, result)`` of a finished task, waiting for one.

        Raises:
            TracekitError: the task's own error (a Ray task error is unwrapped to it); any other exception as is.
        """
        if self._done:
            self.last_key = self._done[0][0]
            return self._done.pop(0)
        if self.executor == "process":
            done, _ = wait(list(self._pending), return_when=FIRST_COMPLETED)
            fut: Future = next(iter(done))
            self.last_key = self._pending.pop(fut)
            return self.last_key, fut.result()
        import ray

        ready, _ = ray.wait(list(self._pending), num_returns=1)
        self.last_key = key = self._pending.pop(ready[0])
        try:
            return key, ray.get(ready[0])
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, TracekitError):
                raise cause from None
            raise

    def __enter__(self) -> "TaskPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            for fut in self._pending:
                fut.cancel()
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._ray_started:
            import ray

            ray.shutdown()


__all__ = ["TaskPool"]
