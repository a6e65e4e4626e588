"""shared_items: the replay program's per-node lists hold one object per distinct value, equal to tolist()."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracekit.replayer.simulation.rank_compile import shared_items


@pytest.mark.parametrize(
    "values",
    [
        np.array([], dtype=np.float64),
        np.array([1.5, -0.0, 0.0, 1.5, math.inf, 2.0, 1.5]),
        np.array([-1, 3, -1, 2**62, 3, -(2**63)], dtype=np.int64),
        np.arange(5_000, dtype=np.float64) % 1_234,  # 1,234 distinct: the hash table grows 8 times
    ],
)
def test_items_equal_tolist_and_are_shared(values):
    out = shared_items(values)
    expected = values.tolist()
    assert [(type(v), math.copysign(1, v), v) for v in out] == [(type(v), math.copysign(1, v), v) for v in expected]
    distinct = {(type(v), repr(v)) for v in expected}
    assert len({id(v) for v in out}) == len(distinct)


def test_nan_is_one_object():
    out = shared_items(np.array([math.nan, 1.0, math.nan]))
    assert math.isnan(out[0]) and out[0] is out[2] and out[1] == 1.0
