"""Kernel classes: which kind of work an op or GPU kernel is, from its name.

One vocabulary for measured traces (``tracekit analyze``) and replays (the
report's time-by-class table), so the two sit side by side:

- ``gemm``: matrix multiplies (cuBLAS/CUTLASS kernels, ``aten::mm``/``addmm``/``bmm``/``matmul``/``linear``);
- ``attention``: fused attention (FlashAttention, FMHA, ``scaled_dot_product_attention``);
- ``comm``: collectives and point-to-point (NCCL kernels, gloo, ``c10d::``, ``record_param_comms``);
- ``memory``: copies and fills (GPU memcpy/memset, ``aten::copy_``, ``fill_``, ``zero_``);
- ``other``: everything else (elementwise, reductions, optimizer, ...).

The rules are name patterns (first match wins, in the order above except that
``comm`` is tested first), the same that HTA-style tools use: kernel names
carry the library's naming (``sm80_xmma_gemm``, ``ampere_sgemm``,
``ncclDevKernel_AllReduce``, ``flash_fwd_kernel``).
"""

from __future__ import annotations

import re

CLASSES = ("gemm", "attention", "comm", "memory", "other")

# generic words ("broadcast") would catch aten::broadcast_tensors: only library and collective-kernel names
_COMM = re.compile(
    r"nccl|gloo|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
    r"|sendrecv",
    re.I,
)
_ATTENTION = re.compile(r"flash|fmha|attention|attn|sdpa|scaled_dot_product", re.I)
_GEMM = re.compile(
    r"gemm|cutlass|cublas|xmma|wgmma|hmma|\bmatmul|aten::(mm|addmm|bmm|baddbmm|linear|matmul)\b"
    r"|aten::_?addmm",
    re.I,
)
_MEMORY = re.compile(
    r"memcpy|memset|aten::(copy_|_to_copy|fill_|zero_|zeros|empty|empty_strided|clone|"
    r"contiguous|cat)\b",
    re.I,
)
_MEMORY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset"})


def kernel_class(name: str, category: str | None = None) -> str:
    """The class of an op or kernel (one of :data:`CLASSES`).

    Args:
        name: the op or kernel name.
        category: the Kineto category when known (``gpu_memcpy``/``gpu_memset`` are ``memory``).
    """
    if category in _MEMORY_CATEGORIES:
        return "memory"
    if _COMM.search(name):
        return "comm"
    if _ATTENTION.search(name):
        return "attention"
    if _GEMM.search(name):
        return "gemm"
    if _MEMORY.search(name):
        return "memory"
    return "other"


__all__ = ["CLASSES", "kernel_class"]
