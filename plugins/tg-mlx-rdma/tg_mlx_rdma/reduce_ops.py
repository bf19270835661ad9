"""How the ``mpi`` transport's allreduce reduces each dtype: an MPI built-in type and op where MPI has one that
is right, else opaque elements combined by numpy (float16, bfloat16, fp8; 8- and 16-bit integer sums).

In:  a tgcore DType and a reduce op ("sum", "max", "min", "prod").
Out: the MPI datatype and op for ``Iallreduce`` (``reduce_types``), or a numpy combine function
     ``f(inbuf, inoutbuf, datatype)`` (``numpy_combiner``; the mlx5 transport uses it too).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tgcore.dtype import DType

__all__ = ["reduce_types", "numpy_combiner"]

# numpy combine functions for ops MPI has no built-in type for (float16, bfloat16, fp8)
_NP_OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
_MPI_TYPE_NAMES = {"int8": "INT8_T", "uint8": "UINT8_T", "int16": "INT16_T", "uint16": "UINT16_T",
                   "int32": "INT32_T", "uint32": "UINT32_T", "int64": "INT64_T", "uint64": "UINT64_T",
                   "float32": "FLOAT", "float64": "DOUBLE", "bool": "C_BOOL"}
_BOOL_OPS = {"sum": "LOR", "max": "LOR", "prod": "LAND", "min": "LAND"}
# Open MPI 4.1's AVX op component saturates MPI_SUM on 8- and 16-bit integers instead of wrapping
# (open-mpi/ompi#8045, closed "wontfix"; Debian 12 ships 4.1.4): those sums are done by numpy.
_NUMPY_SUMS = frozenset({"int8", "uint8", "int16", "uint16"})


def reduce_types(mpi: Any, dt: DType, op: str, user_ops: dict[tuple[str, str], tuple[Any, Any]]) -> tuple[Any, Any]:
    """The MPI datatype and op that reduce ``dt`` with ``op``; ops MPI has no type for are made once into
    ``user_ops`` (the caller frees them)."""
    if dt.name in _MPI_TYPE_NAMES and not (op == "sum" and dt.name in _NUMPY_SUMS):
        mpi_op = _BOOL_OPS[op] if dt.name == "bool" else op.upper()
        return getattr(mpi, _MPI_TYPE_NAMES[dt.name]), getattr(mpi, mpi_op)
    key = (dt.name, op)
    if key not in user_ops:  # no MPI type: whole elements as opaque bytes, combined by numpy
        datatype = mpi.BYTE.Create_contiguous(dt.itemsize).Commit()
        user_ops[key] = (datatype, mpi.Op.Create(numpy_combiner(dt, op), commute=True))
    return user_ops[key]


def numpy_combiner(dt: DType, op: str) -> Any:
    """An MPI user function ``inoutbuf = inbuf (op) inoutbuf`` on ``dt``'s storage (numpy wraps integers)."""
    from tgcore.dtype import dtypes
    combine = _NP_OPS[op]
    if dt.np is not None:
        np_dt = np.dtype(dt.np)

        def same(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
            b = np.frombuffer(inoutbuf, dtype=np_dt)
            combine(np.frombuffer(inbuf, dtype=np_dt), b, out=b)
        return same
    if dt.name == "bfloat16":
        def bf16(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
            b = np.frombuffer(inoutbuf, dtype=np.uint16)
            b[:] = _f32_to_bf16(combine(_bf16_to_f32(np.frombuffer(inbuf, dtype=np.uint16)), _bf16_to_f32(b)))
        return bf16
    bits = np.uint8  # fp8: the core's codecs

    def narrow(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
        a = dtypes.bits_to_float(np.frombuffer(inbuf, dtype=bits), dt)
        b_bits = np.frombuffer(inoutbuf, dtype=bits)
        b = dtypes.bits_to_float(b_bits, dt)
        b_bits[:] = dtypes.float_to_bits(combine(a, b), dt)  # round once per combine
    return narrow


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even; NaN stays a (quiet) NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded
