"""The numbers of an ASTRA-sim configuration, checked against stated ranges with one message form.

Every numeric key of the system JSON and the network YAML that :mod:`.astra_config` imports is checked here,
so an out-of-range value reads the same whatever the key::

    network.yml: key npus_count[0]: must be an integer from 1 to 16,777,216, got 100,000,000
    network.yml: key bandwidth[0]: must be a number from 1e-06 to 1e18 (GB/s), got -5

Integers are printed with thousands separators, other bounds in short scientific form.  The ranges are the
spec loader's (:mod:`.spec_toml`: :data:`MAX_SPEC_NUMBER`, :data:`MIN_SPEC_POSITIVE`, :data:`MAX_NPUS`,
:data:`MAX_DATASET_SPLITS`), so what the importer writes always loads.  A YAML scalar such as ``1e3`` (no dot:
YAML 1.1 reads it as text, while ASTRA-sim's yaml-cpp reads a number) is refused with the spelling to use.
"""

from __future__ import annotations

import math
import os
from typing import Any

from tracekit.errors import SpecError
from tracekit.replayer.simulation.spec_toml import MAX_SPEC_NUMBER, bound_text  # noqa: F401 - bound_text public here too

__all__ = ["bound_text", "checked_number"]


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def checked_number(
    value: Any,
    key: str,
    path: str | os.PathLike[str],
    *,
    integer: bool = False,
    least: float = 0,
    most: float = MAX_SPEC_NUMBER,
    unit: str = "",
    zero_ok: bool = False,
) -> Any:
    """``value`` when it is a number (an integer with ``integer``) from ``least`` to ``most``.

    Args:
        zero_ok: 0 is accepted too (a rate that may be absent: ``peak-perf``), ``least`` bounding the others.
        unit: printed after the range, ``(GB/s)``.

    Raises:
        SpecError: naming the file and key, the range and the value.
    """
    kind = "an integer" if integer else "a number"
    span = f"{'0 or ' if zero_ok else ''}from {bound_text(least)} to {bound_text(most)}"
    says = f"key {key}: must be {kind} {span}{f' ({unit})' if unit else ''}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and math.isfinite(value) and (not integer or isinstance(value, int)):
        if (least <= value <= most) or (zero_ok and value == 0):
            return value
    if isinstance(value, str) and _as_number(value) is not None:
        raise SpecError(
            f"{says}, got the text {value!r} (YAML reads a number without a dot as text: write "
            f"{_as_number(value):.1e})",
            path=path,
        )
    got = bound_text(value) if number and not (integer and isinstance(value, float)) else repr(value)
    raise SpecError(f"{says}, got {got}", path=path)
