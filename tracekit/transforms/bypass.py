"""Removing nodes from a trace while keeping the dependencies that pass through them.

When node ``x`` is removed, every node that waited for ``x`` waits instead
for what ``x`` waited for (its kept ancestors, found through any chain of
removed nodes): a *bypass edge*.  So ``a -> x -> b`` becomes ``a -> b`` and
the order the removed node imposed is kept.  Data and control dependencies are
bypassed separately (control parents of a removed node become the control
parents of its children).  Dependencies on ids that name no node are dropped.
"""

from __future__ import annotations

from typing import Callable, Iterable

from tracekit.model import ExecutionTrace, Node


def _resolver(
    by_id: dict[int, Node], keep_ids: set[int], deps_of: Callable[[Node], list[int]]
) -> Callable[[int], tuple[int, ...]]:
    memo: dict[int, tuple[int, ...]] = {}

    def resolve(dep: int) -> tuple[int, ...]:
        """Kept nodes standing for ``dep`` (itself if kept; else its kept ancestors)."""
        if dep in keep_ids:
            return (dep,)
        if dep in memo:
            return memo[dep]
        # iterative DFS over removed nodes (chains can be long)
        stack = [dep]
        while stack:
            cur = stack[-1]
            if cur in memo:
                stack.pop()
                continue
            node = by_id.get(cur)
            if node is None:
                memo[cur] = ()
                stack.pop()
                continue
            pending = [d for d in deps_of(node) if d not in keep_ids and d not in memo and d in by_id and d != cur]
            if pending:
                stack.extend(pending)
                continue
            out: dict[int, None] = {}
            for d in deps_of(node):
                if d in keep_ids:
                    out[d] = None
                elif d in memo:
                    out.update(dict.fromkeys(memo[d]))
            memo[cur] = tuple(out)
            stack.pop()
        return memo[dep]

    return resolve


def remove_nodes(trace: ExecutionTrace, remove: Callable[[Node], bool] | Iterable[int]) -> ExecutionTrace:
    """``trace`` without the nodes selected by ``remove``, with bypass edges (see module docstring).

    Args:
        remove: a predicate on nodes, or a collection of node ids.

    Returns:
        The same trace object when nothing is removed, else a new trace.
    """
    nodes = trace.nodes
    if callable(remove):
        drop = {n.id for n in nodes if remove(n)}
    else:
        drop = set(remove)
    if not drop:
        return trace
    by_id = {n.id: n for n in nodes}
    keep_ids = {n.id for n in nodes if n.id not in drop}
    rdata = _resolver(by_id, keep_ids, lambda n: n.data_deps)
    rctrl = _resolver(by_id, keep_ids, lambda n: n.ctrl_deps)
    out: list[Node] = []
    for n in nodes:
        if n.id in drop:
            continue
        if all(d in keep_ids for d in n.data_deps) and all(d in keep_ids for d in n.ctrl_deps):
            out.append(n)
            continue
        out.append(n.replace(data_deps=_expand(n.data_deps, rdata, n.id), ctrl_deps=_expand(n.ctrl_deps, rctrl, n.id)))
    return trace.with_nodes(out)


def _expand(deps: list[int], resolve: Callable[[int], tuple[int, ...]], self_id: int) -> list[int]:
    out: dict[int, None] = {}
    for d in deps:
        for r in resolve(d):
            if r != self_id:
                out[r] = None
    return list(out)


def keep_nodes(trace: ExecutionTrace, keep: Callable[[Node], bool]) -> ExecutionTrace:
    """``trace`` with only the nodes ``keep`` selects; dependencies on removed nodes are bypassed."""
    return remove_nodes(trace, lambda n: not keep(n))


def drop_dangling(trace: ExecutionTrace, keep: Callable[[Node], bool]) -> ExecutionTrace:
    """Only the nodes ``keep`` selects; dependencies on removed nodes are dropped (no bypass).

    Used to cut a trace to a window (one iteration) where the removed nodes
    are outside it, not between kept ones.
    """
    nodes = trace.nodes
    kept = [n for n in nodes if keep(n)]
    if len(kept) == len(nodes):
        return trace
    ids = {n.id for n in kept}
    out = []
    for n in kept:
        if all(d in ids for d in n.data_deps) and all(d in ids for d in n.ctrl_deps):
            out.append(n)
        else:
            out.append(
                n.replace(
                    data_deps=[d for d in n.data_deps if d in ids], ctrl_deps=[d for d in n.ctrl_deps if d in ids]
                )
            )
    return trace.with_nodes(out)
