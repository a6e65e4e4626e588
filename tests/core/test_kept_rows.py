"""The kept attributes of one search (``attrsource._kept_rows``): per name, the nodes that have it, compacted.

Checked against the per-name rule written out (positions where the kind is not ABSENT; one kind as a scalar;
INT/BOOL values in the narrowest of int8/16/32 holding them, else int64) on searches mixing every case: a name
no node has, one of each kind, mixed kinds, values at each integer type's edge.
"""

from __future__ import annotations

import numpy as np

from tracekit.wire import kernels as wk
from tracekit.wire.attrsource import _kept_rows


def _rule(kind_row: np.ndarray, value_row: np.ndarray) -> tuple[np.ndarray, object, np.ndarray]:
    at = np.flatnonzero(kind_row != wk.ABSENT).astype(np.int32)
    kinds, values = kind_row[at], value_row[at]
    if not len(at):
        return at, kinds, values
    one = bool((kinds == kinds[0]).all())
    if one and int(kinds[0]) in (wk.INT, wk.BOOL):
        for dtype in (np.int8, np.int16, np.int32):
            if np.iinfo(dtype).min <= values.min() and values.max() <= np.iinfo(dtype).max:
                values = values.astype(dtype)
                break
    return at, (kinds[0] if one else kinds), values


def test_kept_rows_equal_the_per_name_rule():
    rng = np.random.default_rng(34)
    n = 200
    rows = {
        "absent": (np.full(n, wk.ABSENT), np.zeros(n)),
        "bools": (np.where(rng.random(n) < 0.9, wk.BOOL, wk.ABSENT), rng.integers(0, 2, n)),
        "int8_edge": (np.full(n, wk.INT), rng.integers(-128, 128, n)),
        "int16": (np.full(n, wk.INT), np.r_[-129, rng.integers(0, 100, n - 1)]),
        "int32": (np.full(n, wk.INT), np.r_[2**31 - 1, rng.integers(0, 100, n - 1)]),
        "int64": (np.full(n, wk.INT), np.r_[-(2**31) - 1, rng.integers(0, 100, n - 1)]),
        "strings": (np.where(rng.random(n) < 0.1, wk.STRING, wk.ABSENT), rng.integers(0, 2**40, n)),
        "mixed": (rng.choice([wk.ABSENT, wk.INT, wk.FLOAT, wk.STRING], n), rng.integers(-(2**62), 2**62, n)),
        "one_node": (np.r_[wk.INT, np.full(n - 1, wk.ABSENT)], np.r_[7, np.zeros(n - 1)]),
    }
    names = list(rows)
    kind = np.array([rows[x][0] for x in names], dtype=np.int8)
    values = np.array([rows[x][1] for x in names], dtype=np.int64)
    got = _kept_rows(names, kind, values)
    assert list(got) == names
    for k, name in enumerate(names):
        at, kinds, vals = got[name]
        want_at, want_kinds, want_vals = _rule(kind[k], values[k])
        assert at.dtype == np.int32 and at.tolist() == want_at.tolist(), name
        assert np.ndim(kinds) == np.ndim(want_kinds) and np.asarray(kinds).tolist() == np.asarray(want_kinds).tolist()
        assert vals.dtype == want_vals.dtype and vals.tolist() == want_vals.tolist(), name
    assert got["int8_edge"][2].dtype == np.int8 and got["int16"][2].dtype == np.int16
    assert got["int32"][2].dtype == np.int32 and got["int64"][2].dtype == np.int64
    assert got["mixed"][2].dtype == np.int64 and np.ndim(got["mixed"][1]) == 1 and len(got["absent"][0]) == 0
