"""Hypothesis profiles of the suite: ``default`` for `make test`, ``full`` for `make test-full`.

``HYPOTHESIS_PROFILE=full`` selects the full one. Properties that set their own ``max_examples`` pass it through
:func:`examples`, so the default profile runs a quarter of them and the full profile all of them.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
FULL = PROFILE == "full"

settings.register_profile("default", max_examples=25, deadline=None)
settings.register_profile("full", max_examples=200, deadline=None)
settings.load_profile("full" if FULL else "default")


def examples(n: int) -> int:
    """``max_examples`` for a property written for ``n``: ``n`` under the full profile, else a quarter (>= 5)."""
    return n if FULL else max(5, n // 4)
