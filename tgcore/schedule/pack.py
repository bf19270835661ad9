"""Pack the right-hand operand of a large matrix product into the layout a register tile reads best.

In:  a REDUCE_AXIS about to be lowered into a kernel, and ``strides_of``: how the elements of a node lie in
     memory (its buffer's element stride along each axis, or None when it is not plain data in a buffer).
Out: None, or the same sum reading B from a packed copy: a contiguous ``(K, N_pad)`` array (a kernel of its
     own, ``CONTIGUOUS``), each row padded to whole ``PACK_ALIGN`` elements (``packed_width``), viewed back as B;
     for a batch of matrices B (attention's keys, one matrix per head) a ``(batch, K, N_pad)`` array.

A matrix product's register tile (``codegen.gemmplan.gemm_opts``) loads B, the factor that runs along the
output's contiguous axis N, as vectors of columns, one row of K after another. It reads B badly when

- B runs along N across memory (``x @ W.T``: every vector a gather; the kernel gets the slower ``x @ W.T``
  tile with K in its lanes instead, ``nt_gemm_opts``), or
- B's rows are not whole cache lines apart (a 1000-wide matrix: every other vector is split over two lines,
  and the last column tile, padded past the end of the last row, loads lane by lane: measured 12.9 ms packed
  vs 14.5-15.5 ms in place for 1000^3 on one core).

The copy costs K*N loads and stores against the product's M*N*K multiply-adds, so it is made only from
``PACK_MIN_ROWS`` rows of A on, and only up to ``PACK_MAX_BYTES``. Products with fewer rows keep their order of
summation, which batched LLM decoding relies on (batch invariance, see ``codegen.heuristic``); a pack changes no
value, only where B is read from. Only B of float dtype read as it is (no cast: a float16 weight widened in the
product, a decoded quantized one) is packed.
"""
from __future__ import annotations

from collections.abc import Callable

from tgcore.dtype import dtypes
from tgcore.helpers import prod, round_up
from tgcore.runtime.cpufeatures import CACHE_LINE
from tgcore.uop import Ops, UOp
from tgcore.uop.shape import shape_of

PACK_MIN_ROWS = 64       # rows of A from which packing B pays for its copy
PACK_MIN_FLOPS = 1 << 24  # smaller products are not worth a kernel more
PACK_MAX_BYTES = 32 << 20  # a larger copy (a float32 LM head) would hold that much memory more, in a JIT capture
                           # for as long as the capture lives
PACK_ALIGN = 64          # elements per packed row (of more columns) are a multiple of this: whole cache lines, and
                         # whole column tiles of 4 AVX-512 vectors of float32, whose padded lanes read inside the pack

Strides = Callable[[UOp], tuple[int, ...] | None]


def _movement(op: Ops, src: UOp, arg: tuple) -> UOp:
    return UOp(op, src.dtype, (src,), arg)


def _right_operand(mul: UOp, k: int) -> tuple[int, int] | None:
    """(which source of ``mul`` is B, the axis N) when ``mul`` multiplies two broadcast operands, B running along
    the last output axis N and K and, on every other output axis, broadcast or running along it with A (a batch:
    attention's keys per head); A broadcast along N and running along some axis B is broadcast along (its rows)."""
    shape = shape_of(mul)
    outputs = [i for i, s in enumerate(shape) if i != k and s > 1]
    if len(outputs) < 2:
        return None
    n = outputs[-1]
    for pos, e in enumerate(mul.src):
        other = mul.src[1 - pos]
        if e.op is not Ops.EXPAND or other.op is not Ops.EXPAND:
            continue
        s, o = shape_of(e.src[0]), shape_of(other.src[0])
        rows = [i for i in outputs[:-1] if s[i] == 1]
        batch_ok = all(s[i] == 1 or s[i] == o[i] == shape[i] for i in outputs[:-1])
        if s[n] == shape[n] and s[k] == shape[k] and batch_ok and rows and o[n] == 1:
            return pos, n
    return None


def packed_product(node: UOp, strides_of: Strides) -> UOp | None:
    """``node`` (a REDUCE_AXIS) reading its B from a packed copy, or None when B is fine where it is or the
    product too small for a copy to pay (see the module docstring)."""
    op, axes = node.arg
    mul = node.src[0]
    if op is not Ops.ADD or len(axes) != 1 or mul.op is not Ops.MUL or not dtypes.is_float(mul.dtype):
        return None
    k = axes[0]
    found = _right_operand(mul, k)
    if found is None:
        return None
    pos, n = found
    shape = shape_of(mul)
    b = mul.src[pos].src[0]
    batch = prod(s for i, s in enumerate(shape_of(b)) if i not in (k, n))
    rows = prod(s for i, s in enumerate(shape) if i not in (k, n)) // batch  # per matrix B
    if rows < PACK_MIN_ROWS or 2 * prod(shape) < PACK_MIN_FLOPS:
        return None
    if batch * shape[k] * packed_width(shape[n], b.dtype.itemsize) * b.dtype.itemsize > PACK_MAX_BYTES:
        return None
    strides = strides_of(b)
    if strides is None:
        return None
    line = max(1, CACHE_LINE // b.dtype.itemsize)
    if strides[n] == 1 and strides[k] % line == 0:
        return None  # columns contiguous, rows whole cache lines apart: the tile reads B in place
    operand = mul.src[pos].replace(src=(_packed(b, k, n, packed_width(shape[n], b.dtype.itemsize)),))
    return node.replace(src=(mul.replace(src=tuple(operand if i == pos else s for i, s in enumerate(mul.src))),))


def packed_width(n: int, itemsize: int) -> int:
    """Elements per packed row of ``n`` columns: whole ``PACK_ALIGN`` elements, or for fewer columns whole cache
    lines (a narrow B is not copied at several times its size; its tile is at most that wide)."""
    return round_up(n, PACK_ALIGN if n > PACK_ALIGN else max(1, CACHE_LINE // itemsize))


def _packed(b: UOp, k: int, n: int, wide: int) -> UOp:
    """``b`` read from a contiguous ``(batch, K, wide)`` copy (``batch``: the product of its other axes, a batch of
    matrices B or 1)."""
    shape = shape_of(b)
    kk, nn = shape[k], shape[n]
    batch = prod(s for i, s in enumerate(shape) if i not in (k, n))
    order = tuple(i for i in range(len(shape)) if i not in (k, n)) + (k, n)
    inverse = tuple(order.index(i) for i in range(len(shape)))
    flat = _movement(Ops.RESHAPE, _movement(Ops.PERMUTE, b, order), (batch, kk, nn))
    if wide != nn:
        flat = _movement(Ops.PAD, flat, ((0, 0), (0, 0), (0, wide - nn)))
    pack = UOp(Ops.CONTIGUOUS, b.dtype, (flat,))
    view = _movement(Ops.SHRINK, pack, ((0, batch), (0, kk), (0, nn))) if wide != nn else pack
    view = _movement(Ops.RESHAPE, view, tuple(shape[i] for i in order))
    return _movement(Ops.PERMUTE, view, inverse)
