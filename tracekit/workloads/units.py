"""Data types and their sizes: the one dtype table of tracekit.

Every byte count derived from an element count goes through :data:`DTYPE_BYTES`
(canonical names such as ``bf16``) or :func:`torch_dtype_bytes` (PyTorch's
names as execution traces and Kineto record them: ``c10::BFloat16``,
``long int``, the ``c10::ScalarType`` names of ``record_param_comms``).

Sizes are the IEEE 754 / PyTorch storage sizes (``torch.finfo(...).bits / 8``,
``torch.iinfo(...).bits / 8``); ``tf32`` is stored as fp32 (NVIDIA A100
whitepaper, 2020: TF32 is a math mode of the tensor cores on fp32 data).
"""

from __future__ import annotations

#: bytes per element of every canonical dtype
DTYPE_BYTES: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint64": 8,
    "uint32": 4,
    "uint16": 2,
    "uint8": 1,
    "bool": 1,
    "complex128": 16,
    "complex64": 8,
    "complex32": 4,
}
#: dtypes a generated training job computes in (activations, weights, gradients), in the order CLI help lists them
TRAINING_DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")
#: floating-point dtypes (matrix-unit peaks are listed per floating dtype)
FLOAT_DTYPES = frozenset({"fp64", "fp32", "fp16", "bf16", "fp8"})

#: PyTorch dtype names, lower case (ET ``Tensor(<name>)`` types and ``c10::ScalarType`` names) -> canonical dtype
TORCH_DTYPES: dict[str, str] = {
    "float": "fp32",
    "float32": "fp32",
    "double": "fp64",
    "float64": "fp64",
    "c10::half": "fp16",
    "half": "fp16",
    "c10::bfloat16": "bf16",
    "bfloat16": "bf16",
    "c10::float8_e4m3fn": "fp8",
    "c10::float8_e5m2": "fp8",
    "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "long": "int64",
    "long int": "int64",
    "int64": "int64",
    "int": "int32",
    "int32": "int32",
    "short": "int16",
    "short int": "int16",
    "signed char": "int8",
    "char": "int8",
    "unsigned char": "uint8",
    "byte": "uint8",
    "bool": "bool",
    "unsigned short": "uint16",
    "uint16": "uint16",
    "unsigned int": "uint32",
    "uint32": "uint32",
    "unsigned long": "uint64",
    "uint64": "uint64",
    "c10::complex<float>": "complex64",
    "complexfloat": "complex64",
    "c10::complex<double>": "complex128",
    "complexdouble": "complex128",
    "c10::complex<c10::half>": "complex32",
    "complexhalf": "complex32",
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of canonical ``dtype`` (``"bf16"`` -> 2).

    Raises:
        KeyError: an unknown name (callers validate user input against :data:`TRAINING_DTYPES` first).
    """
    return DTYPE_BYTES[dtype]


def torch_dtype(name: str) -> str | None:
    """Canonical dtype of a PyTorch dtype name (case and surrounding spaces ignored), None when unknown."""
    return TORCH_DTYPES.get(name.strip().lower())


def torch_dtype_bytes(name: str) -> int | None:
    """Bytes per element of a PyTorch dtype name (``"c10::BFloat16"`` -> 2), None when unknown."""
    dtype = torch_dtype(name)
    return None if dtype is None else DTYPE_BYTES[dtype]


__all__ = [
    "DTYPE_BYTES",
    "FLOAT_DTYPES",
    "TORCH_DTYPES",
    "TRAINING_DTYPES",
    "dtype_bytes",
    "torch_dtype",
    "torch_dtype_bytes",
]
