"""Reading a :class:`~.perturb.Perturbation`: ``--perturb`` items and the ``[perturb]`` table of a TOML file.

``--perturb`` items (repeatable; each may hold several, comma-separated where unambiguous):

- ``slow=RANKS:FACTOR``: ranks ``3``, ``0-7`` or ``1+5+9`` at compute x FACTOR (``slow=17:1.5``);
- ``delay=NODE:TIME``: machine NODE starts TIME late (``delay=2:50us``; units ns, us, ms, s; no unit = ns);
- ``link=RANK/DIM:FACTOR``: RANK's link into network dimension DIM at FACTOR x bandwidth, ``down`` = removed
  (``link=5/1:0.5``, ``link=5/1:down``);
- ``jitter=compute:SIGMA``, ``jitter=comm:SIGMA``: log-normal jitter (``jitter=compute:0.05``);
- ``seed=N``: the jitter's seed;
- a path to a TOML file (a spec or pipeline file) whose ``[perturb]`` table holds the same::

    [perturb]
    seed = 7
    compute_jitter = 0.05
    comm_jitter = 0.02
    slow = [{ ranks = [17], factor = 1.5 }]
    delay = [{ node = 2, delay_us = 50.0 }]
    links = [{ rank = 5, dimension = 1, bandwidth_factor = 0.5 }]   # 0 = removed
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any, Sequence

from tracekit.errors import ConfigError

from tracekit.replayer.simulation.perturb import LinkFault, Perturbation

__all__ = ["parse_perturbation", "perturbation_from_table"]

_UNITS_NS = {"": 1.0, "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_TIME = re.compile(r"^\s*([0-9.eE+-]+)\s*(ns|us|ms|s)?\s*$")
_TABLE_KEYS = frozenset({"seed", "compute_jitter", "comm_jitter", "slow", "delay", "links"})


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--perturb {what}: {text!r} is not a number") from None


def _ranks(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split("+"):
        lo, _, hi = part.partition("-")
        if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()):
            raise ConfigError(f"--perturb slow: bad ranks {text!r} (e.g. 3, 0-7 or 1+5)")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _time_ns(text: str) -> float:
    m = _TIME.match(text)
    if not m:
        raise ConfigError(f"--perturb delay: bad time {text!r} (e.g. 50us, 2ms)")
    return _number(m.group(1), "delay") * _UNITS_NS[m.group(2) or ""]


def _item(pert: Perturbation, key: str, value: str) -> Perturbation:
    """``pert`` with one ``KEY=VALUE`` item added."""
    head, _, tail = value.rpartition(":")
    if key == "seed":
        return replace(pert, seed=int(_number(value, "seed")))
    if not head:
        raise ConfigError(f"--perturb {key}={value}: expected {key}=WHAT:VALUE")
    if key == "slow":
        factor = _number(tail, "slow")
        return replace(pert, slow=pert.slow + tuple((r, factor) for r in _ranks(head)))
    if key == "delay":
        if not head.isdigit():
            raise ConfigError(f"--perturb delay: bad node {head!r}")
        return replace(pert, node_delay_ns=pert.node_delay_ns + ((int(head), _time_ns(tail)),))
    if key == "link":
        rank, _, dim = head.partition("/")
        if not (rank.isdigit() and dim.isdigit()):
            raise ConfigError(f"--perturb link: expected RANK/DIM:FACTOR, got {value!r}")
        factor = 0.0 if tail == "down" else _number(tail, "link")
        return replace(pert, links=pert.links + (LinkFault(int(rank), int(dim), factor),))
    if key == "jitter" and head == "compute":
        return replace(pert, compute_jitter=_number(tail, "jitter"))
    if key == "jitter" and head == "comm":
        return replace(pert, comm_jitter=_number(tail, "jitter"))
    raise ConfigError(f"--perturb: unknown item {key}={value} (slow=, delay=, link=, jitter=compute:|comm:, seed=)")


def parse_perturbation(items: Sequence[str], base: Perturbation | None = None) -> Perturbation:
    """A :class:`Perturbation` from ``--perturb`` items and TOML files (module doc), added to ``base``.

    Raises:
        ConfigError: a malformed item or table, or a bad value (naming it).
        TracekitError: an unreadable TOML file.
    """
    pert = base or Perturbation()
    for item in items:
        if "=" not in item and (item.endswith(".toml") or os.path.isfile(item)):
            pert = _from_file(item, pert)
            continue
        key, _, value = item.partition("=")
        try:
            pert = _item(pert, key.strip(), value.strip())
        except ConfigError as exc:  # Perturbation's range checks name the field, not the option
            raise (exc if exc.message.startswith("--perturb") else ConfigError(f"--perturb {item}: {exc.message}"))
    return pert


def _from_file(path: str, pert: Perturbation) -> Perturbation:
    import tomllib

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not TOML (nested too deeply)") from None
    table = data.get("perturb")
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: no [perturb] table")
    return perturbation_from_table(table, pert, where=path)


def perturbation_from_table(
    table: dict[str, Any], base: Perturbation | None = None, *, where: str = ""
) -> Perturbation:
    """A :class:`Perturbation` from a ``[perturb]`` table (module doc), added to ``base``.

    Raises:
        ConfigError: an unknown key, a malformed entry or a bad value, naming ``where``, the key and the entry.
    """
    pert = base or Perturbation()
    unknown = sorted(set(table) - _TABLE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: [perturb] has unknown key(s) {', '.join(unknown)}")
    slow = tuple(
        (r, _num(e, "factor", "slow", where)) for e in _tables(table, "slow", where) for r in _rank_list(e, where)
    )
    delay = tuple(
        (int(_num(e, "node", "delay", where, whole=True)), _num(e, "delay_us", "delay", where) * 1e3)
        for e in _tables(table, "delay", where)
    )
    links = tuple(
        LinkFault(
            int(_num(e, "rank", "links", where, whole=True)),
            int(_num(e, "dimension", "links", where, whole=True)),
            _num(e, "bandwidth_factor", "links", where),
        )
        for e in _tables(table, "links", where)
    )
    top = {
        k: _num(table, k, k, where, whole=k == "seed") for k in ("compute_jitter", "comm_jitter", "seed") if k in table
    }
    try:
        return replace(
            pert,
            slow=pert.slow + slow,
            node_delay_ns=pert.node_delay_ns + delay,
            links=pert.links + links,
            compute_jitter=top.get("compute_jitter", pert.compute_jitter),
            comm_jitter=top.get("comm_jitter", pert.comm_jitter),
            seed=int(top.get("seed", pert.seed)),
        )
    except ConfigError as exc:  # a value out of range (Perturbation's checks)
        raise ConfigError(f"{where}: [perturb] {exc.message}") from None


def _tables(table: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    entries = table.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{where}: [perturb] {key} must be a list of tables (module doc), got {str(entries)[:80]}")
    return entries


def _num(entry: dict[str, Any], name: str, key: str, where: str, *, whole: bool = False) -> float:
    value = entry.get(name)
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        kind = "an integer" if whole else "a number"
        shown = "" if key == name else f" entry {str(entry)[:80]}"
        raise ConfigError(f"{where}: [perturb] {key}{shown}: {name} must be {kind}, got {value!r}")
    return float(value)


def _rank_list(entry: dict[str, Any], where: str) -> list[int]:
    ranks = entry.get("ranks")
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise ConfigError(f"{where}: [perturb] slow entry {str(entry)[:80]}: ranks must be a list of integers")
    return ranks
