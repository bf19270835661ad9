"""Hand-written WMMA GEMM kernels for RDNA4 (gfx1200) and RDNA3 (gfx1100).

In: the shape ``(M, N, K)`` and the arch. Out: ``GemmKernel``: the instruction list (DSL ``Inst``s and
labels), its machine code, and the launch geometry. The kernel computes ``C = A @ B`` with A (M, K) and
B (K, N) row-major float16 and C (M, N) row-major **float32** (f32 accumulation, stored unrounded, so
integer-valued products are exact). Kernel arguments (kernarg order): C, A, B.

Shape rules: M and N multiples of 128, K a multiple of 32 (``check_shape``). One workgroup per 128x128
tile of C (grid ``(N/128, M/128, 1)`` workgroups), 128 threads = 4 waves in a 2x2 arrangement; each wave
owns a 64x64 sub-tile = 4x4 WMMA tiles of 16x16, held in 128 accumulator VGPRs (v128..v255).

Per K block of 32:
- every thread loads 4 x 16 bytes of A (rows of the 128x32 block) and 4 x 16 bytes of B (rows of the
  32x128 block) from global memory into registers. The loads for block k+1 are issued right after block
  k is in LDS, so they run while block k is multiplied (prefetch); A and B always come from the same
  K block (the well-known upstream kernel of this shape pairs A's block k+1 with B's block k).
- the registers go to LDS: A as is (row m, 32 halves, stride 40 halves: 8 halves of padding), B
  transposed (row n holds column n of B, same padded stride) with 16-bit stores, so that a WMMA operand
  (a row of A, a column of B) is contiguous in LDS and loads with ``ds_load_b128``.
- two WMMA steps of K=16: each wave loads its 4 A and 4 B fragments and issues 16 WMMAs.
Barriers: before overwriting LDS (everyone finished reading the previous block) and after storing.

WMMA operand layouts (wave32): RDNA4 lane l holds row/column l%16 of A/B, K values 8*(l//16)..+7 (4
VGPRs); result VGPR r of lane l is D[r + 8*(l//16)][l%16]. RDNA3 lane l holds all 16 K values (8 VGPRs,
lanes 16-31 repeat lanes 0-15); result VGPR r of lane l is D[2r + l//16][l%16].
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tg_amd.arch import get_arch
from tg_amd.assembler import assemble
from tg_amd.inst import Inst
from tg_amd.operands import Label, Reg, s, ttmp, v

TILE = 128          # output tile per workgroup (M and N)
BK = 32             # K block staged through LDS
PAD = 8             # halves of padding per LDS row
ROW = (BK + PAD) * 2  # LDS row stride in bytes (80)
LDS_B = TILE * ROW  # B^T starts after A's 128 rows
LDS_BYTES = 2 * TILE * ROW
THREADS = 128
ACC = 128           # first accumulator VGPR

# VGPR map (see module docstring)
V_TID, V_LANE, V_L16, V_HALF = 0, 1, 2, 3
V_GA, V_GB = 4, 8            # 4 global offsets each for the A and B chunks
V_SA, V_SB = 12, 13          # LDS store addresses
V_FA, V_FB = 14, 15          # LDS fragment addresses
V_C = 16                     # C store offset
V_T0, V_T1, V_T2 = 17, 18, 19
V_PA, V_PB = 20, 36          # prefetched A and B chunks (16 VGPRs each)
V_FRAG_A = 52                # A fragments, then B fragments


class ShapeError(ValueError):
    """A GEMM shape the asm kernels do not handle."""


def check_shape(m: int, n: int, k: int) -> None:
    bad = [f"{name}={x} is not a positive multiple of {mult}" for name, x, mult in
           (("M", m, TILE), ("N", n, TILE), ("K", k, BK)) if x <= 0 or x % mult]
    if bad:
        raise ShapeError("asm GEMM shape: " + "; ".join(bad))
    if m * k * 2 >= 1 << 32 or k * n * 2 >= 1 << 32 or m * n * 4 >= 1 << 32:
        raise ShapeError(f"asm GEMM shape {m}x{n}x{k}: a matrix of 4 GiB or more does not fit 32-bit offsets")


@dataclass(frozen=True)
class GemmKernel:
    name: str
    arch: str
    shape: tuple[int, int, int]
    program: tuple[Inst | Label, ...]
    code: bytes
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int]
    lds_bytes: int

    @property
    def flops(self) -> int:
        m, n, k = self.shape
        return 2 * m * n * k


def ins(name: str, *ops: Any, **mods: Any) -> Inst:
    return Inst(name, ops, mods)


class _Builder:
    """Instruction list of one kernel, with the arch's spellings of the few ops that differ."""

    def __init__(self, arch: str):
        self.rdna4 = get_arch(arch).family == "rdna4"
        self.out: list[Inst | Label] = []

    def __call__(self, name: str, *ops: Any, **mods: Any) -> None:
        self.out.append(ins(name, *ops, **mods))

    def label(self, name: str) -> None:
        self.out.append(Label(name))

    def add64(self, pair: int, value: int | Reg) -> None:
        """s[pair:pair+1] += value (a 32-bit unsigned constant or SGPR)."""
        self("s_add_co_u32" if self.rdna4 else "s_add_u32", s[pair], s[pair], value)
        self("s_add_co_ci_u32" if self.rdna4 else "s_addc_u32", s[pair + 1], s[pair + 1], 0)

    def wait(self, counter: str) -> None:
        """Wait until every global load ("load") or LDS/scalar-memory op ("ds", "km") is done."""
        if self.rdna4:
            self({"load": "s_wait_loadcnt", "ds": "s_wait_dscnt", "km": "s_wait_kmcnt"}[counter], 0)
        else:
            self("s_waitcnt", {"vmcnt": 0} if counter == "load" else {"lgkmcnt": 0})

    def barrier(self) -> None:
        if self.rdna4:
            self("s_barrier_signal", -1)
            self("s_barrier_wait", -1)
        else:
            self("s_barrier")


def _frag_regs(rdna4: bool) -> int:
    return 4 if rdna4 else 8


def build_program(m: int, n: int, k: int, arch: str) -> list[Inst | Label]:
    """The instruction list of the GEMM for this shape and arch (see module docstring)."""
    check_shape(m, n, k)
    b = _Builder(arch)
    rdna4 = b.rdna4
    fr = _frag_regs(rdna4)
    v_fb = V_FRAG_A + 4 * fr
    # ---- arguments and workgroup position
    b("s_load_b128", s[4:7], s[0:1], 0)       # C, A
    b("s_load_b64", s[8:9], s[0:1], 16)       # B
    if rdna4:
        b("s_mov_b32", s[10], ttmp[9])                       # workgroup x: column tile
        b("s_and_b32", s[11], ttmp[7], 0xFFFF)               # workgroup y: row tile
    else:
        b("s_mov_b32", s[10], s[2])
        b("s_mov_b32", s[11], s[3])
    b("v_and_b32", v[V_TID], 0x3FF, v[V_TID])
    b("v_and_b32", v[V_LANE], 31, v[V_TID])
    b("v_and_b32", v[V_L16], 15, v[V_TID])
    b("v_bfe_u32", v[V_HALF], v[V_TID], 4, 1)                 # lane // 16
    b("v_lshrrev_b32", v[V_T0], 5, v[V_TID])
    b("v_readfirstlane_b32", s[12], v[V_T0])                 # wave id 0..3
    b("s_lshr_b32", s[13], s[12], 1)                         # wave row (wm)
    b("s_and_b32", s[14], s[12], 1)                          # wave column (wn)
    # ---- per-thread global offsets of the 4 A chunks and 4 B chunks (relative to the block bases)
    b("v_lshrrev_b32", v[V_T0], 2, v[V_TID])                 # A row = t / 4
    b("v_mul_lo_u32", v[V_T0], v[V_T0], 2 * k)
    b("v_and_b32", v[V_T1], 3, v[V_TID])                     # A k chunk = t % 4
    b("v_lshl_add_u32", v[V_GA], v[V_T1], 4, v[V_T0])
    for i in range(1, 4):
        b("v_add_nc_u32", v[V_GA + i], 32 * 2 * k * i, v[V_GA])
    b("v_lshrrev_b32", v[V_T0], 4, v[V_TID])                 # B row = t / 16
    b("v_mul_lo_u32", v[V_T0], v[V_T0], 2 * n)
    b("v_and_b32", v[V_T1], 15, v[V_TID])                    # B n chunk = t % 16
    b("v_lshl_add_u32", v[V_GB], v[V_T1], 4, v[V_T0])
    for i in range(1, 4):
        b("v_add_nc_u32", v[V_GB + i], 8 * 2 * n * i, v[V_GB])
    # ---- LDS store addresses: A[row][kchunk*8], B^T[nchunk*8][krow]
    b("v_lshrrev_b32", v[V_T0], 2, v[V_TID])
    b("v_mul_u32_u24", v[V_T0], ROW, v[V_T0])
    b("v_and_b32", v[V_T1], 3, v[V_TID])
    b("v_lshl_add_u32", v[V_SA], v[V_T1], 4, v[V_T0])
    b("v_and_b32", v[V_T0], 15, v[V_TID])
    b("v_mul_u32_u24", v[V_T0], 8 * ROW, v[V_T0])
    b("v_lshrrev_b32", v[V_T1], 4, v[V_TID])
    b("v_lshl_add_u32", v[V_T0], v[V_T1], 1, v[V_T0])
    b("v_add_nc_u32", v[V_SB], LDS_B, v[V_T0])
    # ---- LDS fragment addresses: row (wm*64 + lane%16) of A, row (wn*64 + lane%16) of B^T
    b("s_mul_i32", s[16], s[13], 64 * ROW)
    b("s_mul_i32", s[17], s[14], 64 * ROW)
    b("v_mul_u32_u24", v[V_T0], ROW, v[V_L16])
    if rdna4:   # lanes 16-31 start at K=8
        b("v_lshl_add_u32", v[V_T0], v[V_HALF], 4, v[V_T0])
    b("v_add_nc_u32", v[V_FA], s[16], v[V_T0])
    b("v_add_nc_u32", v[V_T0], s[17], v[V_T0])
    b("v_add_nc_u32", v[V_FB], LDS_B, v[V_T0])
    # ---- C offset of this lane's first result: row wm*64 + (8 or 1)*half, column wn*64 + lane%16
    b("s_lshl_b32", s[16], s[13], 6)
    b("v_lshl_add_u32" if rdna4 else "v_add_nc_u32", *((v[V_T0], v[V_HALF], 3, s[16]) if rdna4
                                                       else (v[V_T0], s[16], v[V_HALF])))
    b("v_mul_lo_u32", v[V_T0], v[V_T0], n)
    b("s_lshl_b32", s[17], s[14], 6)
    b("v_add3_u32", v[V_T0], v[V_T0], s[17], v[V_L16])
    b("v_lshlrev_b32", v[V_C], 2, v[V_T0])
    # ---- zero the accumulators, two per dual-issue instruction
    for r in range(ACC, 256, 2):
        b.out.append(Inst("v_dual_mov_b32", (v[r], 0), dual=ins("v_dual_mov_b32", v[r + 1], 0)))
    # ---- block bases: A += m0*K*2, B += n0*2, C += (m0*N + n0)*4
    b.wait("km")
    b("s_mul_i32", s[16], s[11], TILE * 2 * k)
    b.add64(6, s[16])
    b("s_lshl_b32", s[16], s[10], 8)                          # n0 * 2 = wgx * 256
    b.add64(8, s[16])
    b("s_mul_i32", s[16], s[11], TILE * 4 * n)
    b("s_lshl_b32", s[17], s[10], 9)                          # n0 * 4
    b("s_add_co_u32" if rdna4 else "s_add_u32", s[16], s[16], s[17])
    b.add64(4, s[16])
    # ---- prologue: load K block 0
    _global_loads(b, n)
    b("s_mov_b32", s[15], k // BK)
    b.label("kloop")
    b.wait("load")
    b.barrier()                                              # everyone is done reading the previous block
    for i in range(4):
        b("ds_store_b128", v[V_SA], v[V_PA + 4 * i:V_PA + 4 * i + 3], offset=i * 32 * ROW)
    for i in range(4):
        for d in range(4):
            reg = v[V_PB + 4 * i + d]
            b("ds_store_b16", v[V_SB], reg, offset=2 * d * ROW + 16 * i)
            b("ds_store_b16_d16_hi", v[V_SB], reg, offset=(2 * d + 1) * ROW + 16 * i)
    b.wait("ds")
    b.barrier()
    b("s_cmp_eq_u32", s[15], 1)
    b("s_cbranch_scc1", Label("compute"))
    _global_loads(b, n)                                         # prefetch block k+1 (A and B alike)
    b.label("compute")
    for kk in range(BK // 16):
        for t in range(4):
            for part in range(fr // 4):
                off = t * 16 * ROW + kk * 32 + part * 16
                b("ds_load_b128", v[V_FRAG_A + t * fr + 4 * part:V_FRAG_A + t * fr + 4 * part + 3], v[V_FA],
                  offset=off)
                b("ds_load_b128", v[v_fb + t * fr + 4 * part:v_fb + t * fr + 4 * part + 3], v[V_FB], offset=off)
        b.wait("ds")
        for ti in range(4):
            for tj in range(4):
                acc = ACC + (ti * 4 + tj) * 8
                b("v_wmma_f32_16x16x16_f16", v[acc:acc + 7], v[V_FRAG_A + ti * fr:V_FRAG_A + ti * fr + fr - 1],
                  v[v_fb + tj * fr:v_fb + tj * fr + fr - 1], v[acc:acc + 7])
    b("s_add_co_i32" if rdna4 else "s_add_i32", s[15], s[15], -1)
    b("s_cmp_lg_u32", s[15], 0)
    b("s_cbranch_scc1", Label("kloop"))
    # ---- epilogue: row by row (advancing the C base), 4 columns of tiles per row
    row_before = 0
    for ti in range(4):
        for r in range(8):
            row = ti * 16 + (r if rdna4 else 2 * r)
            if row != row_before:
                b.add64(4, (row - row_before) * n * 4)
                row_before = row
            for tj in range(4):
                b("global_store_b32", v[V_C], v[ACC + (ti * 4 + tj) * 8 + r], s[4:5], offset=tj * 64)
    b("s_endpgm")
    return b.out


def _global_loads(b: _Builder, n: int) -> None:
    """Load one K block (4 A chunks, 4 B chunks per thread) and advance the A and B bases to the next."""
    for i in range(4):
        b("global_load_b128", v[V_PA + 4 * i:V_PA + 4 * i + 3], v[V_GA + i], s[6:7])
    for i in range(4):
        b("global_load_b128", v[V_PB + 4 * i:V_PB + 4 * i + 3], v[V_GB + i], s[8:9])
    b.add64(6, BK * 2)
    b.add64(8, BK * 2 * n)


@lru_cache(maxsize=32)
def gemm_kernel(m: int, n: int, k: int, arch: str = "gfx1200") -> GemmKernel:
    """The GEMM kernel for (M, N, K) on ``arch`` (gfx1200/gfx1201: RDNA4, gfx1100: RDNA3)."""
    arch = get_arch(arch).name
    if get_arch(arch).family not in ("rdna3", "rdna4"):
        raise ShapeError(f"asm GEMM kernels exist for RDNA3 and RDNA4, not {arch}")
    program = build_program(m, n, k, arch)
    code = assemble(program, arch)
    return GemmKernel(f"gemm_{m}x{n}x{k}_{arch}", arch, (m, n, k), tuple(program), code,
                      (n // TILE, m // TILE, 1), (THREADS, 1, 1), LDS_BYTES)
