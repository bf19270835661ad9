"""Small byte vectors widened to 32-bit lanes on the X86 renderer (``tg_x86.bytevec.widened_bytes``): a K-quant's
per-16 scales (two bytes of a block, each in 4 lanes, masked, shifted or joined, then converted) computed in an
xmm and widened by one vpmovzxbd/vpmovsxbd instead of lane by lane.

References: numpy (every value is a small integer times a float32, one rounding on both sides), and the kernel's
instructions (no scalar int -> float conversion, no byte taken out of a vector one at a time)."""
from __future__ import annotations

import numpy as np
import pytest
from test_x86_bytedot import instructions
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Op

from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"


def repeated(t: Tensor, times: int = 4) -> Tensor:
    """``(N, k)`` -> ``(N, k * times)``: each byte in ``times`` neighbouring lanes (a per-16 scale's layout)."""
    n, k = t.shape
    return t.reshape(n, k, 1).expand(n, k, times).reshape(n, k * times)


def row_shifts(n: int, device: str) -> Tensor:
    """``(N, 1)`` uint8: a shift that depends on the row, 0, 2, 4 or 6 (one amount per row, held in a register)."""
    return ((Tensor.arange(n, dtype="uint8", device=device) % 4) * 2).reshape(n, 1)


def np_shifts(n: int) -> np.ndarray:
    return ((np.arange(n) % 4) * 2).astype(np.uint8).reshape(n, 1)


CASES = {  # name -> (lanes as tensor ops on (a, b) uint8 (N, 2), the same in numpy; both before the float cast)
    "low nibble": (lambda a, b: repeated(a) & 15, lambda a, b: np.repeat(a, 4, 1) & 15),
    "high nibble": (lambda a, b: repeated(a) >> 4, lambda a, b: np.repeat(a, 4, 1) >> 4),
    "field shifted per row": (lambda a, b: (repeated(a) >> row_shifts(a.shape[0], a.device)) & 3,
                              lambda a, b: (np.repeat(a, 4, 1) >> np_shifts(a.shape[0])) & 3),
    "field shifted per row, wider mask": (lambda a, b: (repeated(a) >> row_shifts(a.shape[0], a.device)) & 0x3C,
                                          lambda a, b: (np.repeat(a, 4, 1) >> np_shifts(a.shape[0])) & 0x3C),
    "two fields joined": (lambda a, b: (repeated(a) & 15) | ((repeated(b) & 3) << 4),
                          lambda a, b: (np.repeat(a, 4, 1) & 15) | ((np.repeat(b, 4, 1) & 3) << 4)),
    "signed bytes": (lambda a, b: repeated(a).bitcast("int8"), lambda a, b: np.repeat(a, 4, 1).view(np.int8)),
    "int32 with an offset": (lambda a, b: repeated(a ^ 0x5A).cast("int32") - 32,
                             lambda a, b: np.repeat(a ^ 0x5A, 4, 1).astype(np.int32) - 32),
    "4 lanes": (lambda a, b: repeated(a, 2) & 7, lambda a, b: np.repeat(a, 2, 1) & 7),
}


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (rows, 2), dtype=np.uint8), rng.integers(0, 256, (rows, 2), dtype=np.uint8)


def scaled(lanes: Tensor, y: Tensor) -> Tensor:
    return lanes.cast("float32") * y


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rows", [7, 64])
def test_widened_bytes_match_numpy(case, rows):
    a, b = data(rows, seed=rows)
    ours, theirs = CASES[case]
    want_lanes = theirs(a, b)
    y = np.random.default_rng(1).standard_normal(want_lanes.shape).astype(np.float32)
    out = scaled(ours(Tensor(a, device=X86), Tensor(b, device=X86)), Tensor(y, device=X86)).numpy()
    np.testing.assert_array_equal(out, want_lanes.astype(np.float32) * y)


@pytest.mark.parametrize("case", [c for c in CASES if c != "4 lanes"])   # (rows of 4 stay scalar: no upcast)
def test_widened_bytes_stay_in_vectors(case):
    """One vpmovzxbd/vpmovsxbd per widened vector; no byte extracted or inserted, no int -> float lane by lane."""
    a, b = data(64, seed=0)
    ours, theirs = CASES[case]
    y = np.ones(theirs(a, b).shape, np.float32)
    ops = [i.op for i in instructions(scaled(ours(Tensor(a, device=X86), Tensor(b, device=X86)),
                                             Tensor(y, device=X86)))]
    assert Op.VPMOVZXBD in ops or Op.VPMOVSXBD in ops
    assert not {Op.VCVTSI2SS, Op.VPEXTRB, Op.VPINSRB, Op.VINSERTPS} & set(ops)


def test_bytes_read_elsewhere_stay_lane_by_lane():
    """A byte vector something other than a widening reads too (here: stored as bytes) keeps the general rules for
    the widening as well; the values match numpy."""
    a, _ = data(16, seed=2)
    t = repeated(Tensor(a, device=X86)) & 15
    y = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    f, raw = scaled(t, Tensor(y, device=X86)), (t + 1)
    Tensor.realize(f, raw)
    want = np.repeat(a, 4, 1) & 15
    np.testing.assert_array_equal(f.numpy(), want.astype(np.float32) * y)
    np.testing.assert_array_equal(raw.numpy(), want + 1)


def test_fields_masked_by_their_reader_are_not_masked_twice():
    """``(q >> s) & 3`` with ``s`` at most 6: the AND clears the bits vpsrlw brought in from the neighbour byte, so
    no (0xFF >> s) mask is made (vpsllw + vpor); with ``& 0x3C`` it is (the test above: same values as numpy)."""
    # (row counts no other test uses: kernels that differ only in a constant come to share one program, the
    # constant read from memory)
    for rows, keep, masked in ((48, 3, False), (40, 0x3C, True)):
        a, _ = data(rows, seed=0)
        y = Tensor(np.ones((rows, 8), np.float32), device=X86)
        t = scaled((repeated(Tensor(a, device=X86)) >> row_shifts(rows, X86)) & keep, y)
        ops = [i.op for i in instructions(t)]
        assert Op.VPSRLW in ops and (Op.VPOR in ops) == masked
