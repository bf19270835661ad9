"""Matrix-shaped views and products: tril/triu, diag/diagonal, roll, meshgrid, unfold, einsum.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.

In:  tensors and torch's arguments for each function.
Out: lazy tensors. diagonal, roll, unfold and meshgrid are movement ops only (views, gradients for free);
     tril/triu are a compare against two aranges and a where; einsum lines every operand up over all the
     formula's letters, multiplies and sums the letters the output drops (one reduction).
"""
# mypy: disable-error-code="misc"
# (methods annotate ``self: Tensor``: a mixin is only ever used as a base of Tensor)
from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tgcore.errors import TensorValueError

if TYPE_CHECKING:
    from tgcore.tensor import Tensor


def _axis(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, {max(ndim, 1) - 1}], "
                         f"but got {axis})")
    return axis % max(ndim, 1)


class LayoutMixin:
    __slots__ = ()

    # ---------------------------------------------------------------- triangles
    def _triangle(self: Tensor, diagonal: int, upper: builtins.bool) -> Tensor:
        if self.ndim < 2:
            raise TensorValueError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions")
        n, m = self.shape[-2:]
        offset = self.arange(m, device=self.device).reshape(1, m) - self.arange(n, device=self.device).reshape(n, 1)
        keep = offset >= diagonal if upper else offset <= diagonal
        return keep.where(self, 0)

    def tril(self: Tensor, diagonal: int = 0) -> Tensor:
        """The lower triangle of the last two axes (column - row <= diagonal), zeros above."""
        return self._triangle(diagonal, False)

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:
        """The upper triangle of the last two axes (column - row >= diagonal), zeros below."""
        return self._triangle(diagonal, True)

    # ---------------------------------------------------------------- diagonals
    def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of axes ``dim1`` and ``dim2`` (above it for offset > 0), as a new last axis (a view)."""
        a, b = _axis(dim1, self.ndim), _axis(dim2, self.ndim)
        if a == b:
            raise TensorValueError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
        rows, cols = x.shape[-2:]
        lead = [None] * (x.ndim - 2)
        lo_r, lo_c = max(-offset, 0), max(offset, 0)
        n = max(0, min(rows - lo_r, cols - lo_c))
        x = x.shrink(lead + [(min(lo_r, rows), min(lo_r, rows) + n), (min(lo_c, cols), min(lo_c, cols) + n)])
        if n == 0:
            return x.reshape(x.shape[:-2] + (0,))
        # an (n, n) square: flat, padded by n, read as rows of n + 1 -> the diagonal is column 0
        pre = x.shape[:-2]
        flat = x.reshape(pre + (n * n,)).pad(lead + [(0, n)])
        return flat.reshape(pre + (n, n + 1)).shrink(lead + [None, (0, 1)]).reshape(pre + (n,))

    def diag(self: Tensor, diagonal: int = 0) -> Tensor:
        """1-d: a square matrix with this vector on the given diagonal; 2-d: that diagonal as a vector."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise TensorValueError(f"diag(): Supports 1D or 2D tensors. Got {self.ndim}D")
        n, k = self.shape[0], abs(diagonal)
        # each element padded by n (a row of the n x (n+1) layout), then read as an n x n matrix
        square = self.reshape(n, 1).pad([None, (0, n)]).reshape(n * (n + 1))
        square = square.shrink([(0, n * n)]).reshape(n, n) if n else square.reshape(0, 0)
        return square.pad([(0, k), (k, 0)] if diagonal > 0 else [(k, 0), (0, k)])

    # ---------------------------------------------------------------- roll, meshgrid, unfold
    def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Elements shifted along ``dims`` (wrapping around); without dims, along the flattened tensor."""
        tensor_type = type(self)
        if dims is None:
            if not isinstance(shifts, int):
                raise TensorValueError("roll: without dims, shifts must be one int")
            return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
        sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        ds = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(sh) != len(ds):
            raise TensorValueError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:{len(ds)}")
        x = self
        for s, d in zip(sh, ds, strict=True):
            ax = _axis(d, x.ndim)
            n = x.shape[ax] if x.ndim else 1
            if n == 0 or s % n == 0:
                continue
            k = s % n
            first = x.shrink([None] * ax + [(n - k, n)] + [None] * (x.ndim - ax - 1))
            rest = x.shrink([None] * ax + [(0, n - k)] + [None] * (x.ndim - ax - 1))
            x = tensor_type.cat([first, rest], dim=ax)
        return x

    @staticmethod
    def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids of 1-d (or 0-d) tensors; ``indexing="xy"`` swaps the first two axes (numpy's default)."""
        if indexing not in ("ij", "xy"):
            raise TensorValueError(f"meshgrid: indexing must be one of 'xy' or 'ij', but received: {indexing}")
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            tensors = tuple(tensors[0])
        if any(t.ndim > 1 for t in tensors):
            raise TensorValueError("meshgrid: Expected 0D or 1D tensor in the tensor list")
        vecs = [t.reshape(-1) for t in tensors]
        shape = tuple(v.shape[0] for v in vecs)
        grids = [v.reshape(tuple(-1 if i == j else 1 for j in range(len(vecs)))).expand(shape)
                 for i, v in enumerate(vecs)]
        if indexing == "xy" and len(vecs) >= 2:  # the first two output axes swapped
            grids = [g.transpose(0, 1) for g in grids]
        return tuple(grids)

    def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
        """Windows of ``size`` elements, ``step`` apart, along ``dimension``: that axis becomes the window count
        and the windows' elements a new last axis (torch.Tensor.unfold; a view)."""
        from tgcore.nn.functional import windows
        d = _axis(dimension, self.ndim)
        n = self.shape[d] if self.ndim else 1
        if size < 0 or size > n:
            raise TensorValueError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
        if step <= 0:
            raise TensorValueError(f"step is {step} but must be > 0")
        if self.ndim == 0:
            return self.reshape(1)
        order = [i for i in range(self.ndim) if i != d] + [d]
        w = windows(self.permute(order), (size,), (step,), (1,))  # (rest..., O, K)
        back = list(range(self.ndim - 1))
        back.insert(d, self.ndim - 1)
        return w.permute(back + [self.ndim])

    # ---------------------------------------------------------------- einsum
    @staticmethod
    def einsum(formula: str, *operands: Any) -> Tensor:
        """Sum of products over the letters of ``formula`` ("ij,jk->ik"; without "->" the output is the letters
        used once, sorted; "..." stands for leading broadcast axes; a letter repeated in one operand takes its
        diagonal)."""
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        lhs, arrow, out = formula.replace(" ", "").partition("->")
        specs = lhs.split(",")
        if len(specs) != len(operands):
            raise TensorValueError(f"einsum(): {len(specs)} operands in the formula, {len(operands)} given")
        ell = max((t.ndim - len(s.replace("...", "")) for s, t in zip(specs, operands, strict=True) if "..." in s),
                  default=0)
        dots = "".join(chr(0x100 + i) for i in range(ell))  # one private letter per broadcast axis
        specs = [s.replace("...", dots[len(dots) - (t.ndim - len(s.replace("...", ""))):])
                 for s, t in zip(specs, operands, strict=True)]
        if not arrow:
            counts = {c: "".join(specs).count(c) for c in "".join(specs)}
            out = dots + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in dots))
        else:
            out = out.replace("...", dots)
        letters = list(dict.fromkeys(out + "".join(specs)))
        sizes: dict[str, int] = {}
        lined = []
        for spec, t in zip(specs, operands, strict=True):
            if len(spec) != t.ndim:
                raise TensorValueError(f"einsum(): the subscripts {spec!r} do not match an operand of {t.ndim} dims")
            while len(set(spec)) != len(spec):  # a repeated letter: its diagonal, as a new last axis
                c = next(c for c in spec if spec.count(c) > 1)
                i = spec.index(c)
                j = spec.index(c, i + 1)
                t = t.diagonal(0, i, j)
                spec = spec[:i] + spec[i + 1:j] + spec[j + 1:] + c
            for c, n in zip(spec, t.shape, strict=True):
                if sizes.setdefault(c, n) != n and 1 not in (n, sizes[c]):
                    raise TensorValueError(f"einsum(): letter {c!r} has sizes {sizes[c]} and {n}")
                sizes[c] = max(sizes[c], n)
            present = [c for c in letters if c in spec]
            t = t.permute([spec.index(c) for c in present])
            lined.append(t.reshape(tuple(t.shape[present.index(c)] if c in present else 1 for c in letters)))
        prod = lined[0]
        for t in lined[1:]:
            prod = prod * t
        drop = tuple(i for i, c in enumerate(letters) if c not in out)
        total = prod.sum(drop, dtype=prod.dtype) if drop else prod
        kept = [c for c in letters if c in out]
        return total.permute([kept.index(c) for c in out]) if kept else total
