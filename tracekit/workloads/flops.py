"""FLOP formulas shared by the generators, the op-cost model and the calibration.

* A GEMM ``[m x k] @ [k x n]`` is ``2 m k n`` FLOPs (a multiply and an add per
  term; not MACs) and touches ``m k + k n + m n`` elements (Williams et al.
  2009's roofline counts; PyTorch's ``torch.utils.flop_counter.mm_flop``).
* Adam / AdamW: 12 FLOPs per parameter element per step (our count of the
  moment updates, bias corrections, square root, division and weight update);
  mixed precision keeps fp32 master weights, momentum and variance, each read
  and written: ``2 (4 + 4 + 4)`` bytes per element (Rajbhandari et al. 2020,
  "ZeRO", section 3.1).
* One iteration of a GPT model (Narayanan et al. 2021, SC21, section 5.1,
  equation (3)): ``72 B s L h^2 (1 + s / (6 h) + V / (12 L h))`` FLOPs without
  recompute, ``96 B s L h^2 (1 + s / (6 h) + V / (16 L h))`` with full
  activation recompute (the forward runs twice).
"""

from __future__ import annotations

ADAM_FLOPS_PER_PARAM = 12
ADAM_STATE_BYTES_PER_PARAM = 2 * (4 + 4 + 4)
SGD_FLOPS_PER_PARAM = 2


def gemm_flops(m: int, k: int, n: int, batch: int = 1) -> int:
    """FLOPs of ``batch`` GEMMs ``[m x k] @ [k x n]``: ``2 m k n batch``."""
    return 2 * m * k * n * batch


def gemm_elements(m: int, k: int, n: int, batch: int = 1) -> int:
    """Elements read and written by ``batch`` GEMMs ``[m x k] @ [k x n]``: ``batch (m k + k n + m n)``."""
    return batch * (m * k + k * n + m * n)


def gpt_iteration_flops(
    batch: int, seq: int, layers: int, hidden: int, vocab: int, *, full_recompute: bool = False
) -> float:
    """FLOPs of one training iteration of a GPT model (Narayanan et al. 2021, equation (3); module docstring).

    Args:
        batch: global batch ``B`` (sequences); seq: ``s``; layers: ``L``; hidden: ``h``; vocab: ``V``.
        full_recompute: count the forward twice (the paper's 96 form) rather than once (72).
    """
    b, s, l, h, v = batch, seq, layers, hidden, vocab
    if full_recompute:
        return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


__all__ = [
    "ADAM_FLOPS_PER_PARAM",
    "ADAM_STATE_BYTES_PER_PARAM",
    "SGD_FLOPS_PER_PARAM",
    "gemm_elements",
    "gemm_flops",
    "gpt_iteration_flops",
]
