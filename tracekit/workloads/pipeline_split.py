"""How a model's layers are split over pipeline chunks (virtual stages), evenly or not.

Megatron-LM splits ``L`` layers evenly over ``pp x v`` chunks and refuses other counts.  Real models do not
always divide: Llama 3 405B has 126 layers on 16 stages (Dubey et al. 2024, "The Llama 3 Herd of Models",
section 3.3.2: one transformer layer fewer on the first and the last stage, which carry the embedding and
the output layer), BLOOM-176B 70 layers on 12.  :func:`chunk_layers` gives each chunk its layers:

* ``L`` divisible by ``n = pp x v``: ``L / n`` each (Megatron-LM);
* ``L + 2`` divisible by ``n``: the embedding and the output layer count as one layer each, so the first and
  the last chunk hold one layer fewer (Llama 3; Megatron-Core's ``--account-for-embedding-in-pipeline-split``
  and ``--account-for-loss-in-pipeline-split``);
* otherwise ``floor(L / n)`` each and the ``L mod n`` extra layers on the middle chunks (never on the first or
  the last while a middle chunk is free), so the stages with the embedding and the head stay lighter.
"""

from __future__ import annotations

from tracekit.errors import ConfigError


def chunk_layers(num_layers: int, pp: int, virtual_stages: int = 1) -> tuple[range, ...]:
    """The layer indices of each virtual stage ``0 .. pp * virtual_stages - 1`` (module doc for the rule).

    Raises:
        ConfigError: fewer layers than chunks (a chunk would hold none).
    """
    n = pp * virtual_stages
    if num_layers < n:
        raise ConfigError(f"{num_layers} layers cannot fill pp={pp} x virtual stages {virtual_stages} = {n} chunks")
    if num_layers % n == 0:
        counts = [num_layers // n] * n
    elif (num_layers + 2) % n == 0 and (num_layers + 2) // n >= 2:
        per = (num_layers + 2) // n
        counts = [per - 1] + [per] * (n - 2) + [per - 1] if n > 1 else [num_layers]
    else:
        counts = [num_layers // n] * n
        order = list(range(1, n - 1)) + [0, n - 1] if n > 2 else list(range(n))
        for chunk in order[: num_layers % n]:
            counts[chunk] += 1
    out, start = [], 0
    for count in counts:
        out.append(range(start, start + count))
        start += count
    return tuple(out)


__all__ = ["chunk_layers"]
