"""How fast can a grid type's GEMV be on this CPU? The cost of a grid-row lookup and a hand-written peer kernel,
next to tg-gguf's IQ1_S integer GEMV. Prints figures and ratios; asserts nothing.

    python plugins/tg-gguf/bench/grid_bound.py [--size 4096] [--calls 200]     (CPU_COUNT=1: one thread)

1. Lookups of 8-byte table rows (IQ1_S, IQ1_M, IQ2_XXS and IQ2_XS read one per 8 weights; 4096 rows, random row
   numbers), one thread: ns per 4 rows (one block of 32 weights) by a 256-bit gather (vpgatherdq ymm: what
   tg-gguf's C kernels do), a 512-bit gather of 8 rows, 4 scalar loads put together by inserts, and 4 broadcast
   loads put together by blends.
2. The IQ1_S integer GEMV ``size x size`` on ``CPU_COUNT`` threads (default: the cores this process may use): ns
   per block of 32 weights and row on a thread. tg-gguf's kernel (``tg_gguf.intdot.int_matmul``, jitted, the
   activations' quantization included: ~20 us) against a hand-written C peer in 512-bit vectors: two blocks per
   vector (one vpgatherdq zmm, one vpdpbusd, one conversion and one FMA per two blocks, 4 rows at once), the 32
   grid indices of a super-block computed together ("peer"), or per pair of blocks from a u32 of their two qh
   ("pair indices"), or without the lookups (the index bits stand for the rows: what everything else costs); each
   also with the blocks' scales ``2s + 1`` folded in integers ("int scales": one ``vpdpwssd`` of a pair's int32
   sums, which fit in 16 bits, by their scales, where a conversion and an FMA were; one conversion and FMA per
   super-block and row, as llama.cpp's IQ kernels with their activation scale per 256); a peer with the weight's
   rows in the lanes ("row lanes": 8 rows, their grid rows gathered by one vpgatherdq zmm per 8 values, one vpdpbusd
   against the 8 activation bytes broadcast, lanes 2l and 2l + 1 row l's; the scales folded by one vpdpwssd per
   block and 8 rows; its weight repacked in numpy first, each grid row's whole index as a uint16, the scales as bytes:
   84 bytes per 256 values and row against the file's 50, so it is the lower bound of that layout), with each 4
   bytes of a grid row gathered by itself instead ("4-byte rows": vpgatherdd ymm, 8 lanes of one row each, the
   form tgcore's row-lane products take today), and without the lookups; and
   ``gguf.py``'s streaming reference (a float32 row sum over the weight's bytes) with the 40% bar. The peer reads
   the same bytes (the row lanes: repacked), table and quantized activations as tg-gguf's kernel; its products are
   compared with tg-gguf's (max relative difference: summation order only).

The activations are quantized per 256, tg-gguf's kernel's too (IQ1_S put in ``intdot.ACT_BLOCKS`` for this run:
the policy keeps the grid types per 32, see there).
The peer is a measuring stick only (like llama.cpp in ``tg-llm``'s bench): nothing in tg-gguf runs it. It needs
AVX512F/BW/VL, VNNI and F16C (skipped otherwise) and splits its rows with OpenMP, whose threads spin between calls:
on a busy machine its two-thread times are the steadier ones, so compare the kernels on one thread.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("CPU_COUNT", str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # random_blocks

import numpy as np  # noqa: E402

LOOKUPS_C = r"""
#include <immintrin.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
/* ns per 4 rows of 8 bytes at the row numbers idx[0..n) from tab, best of `calls` passes; way: 0 ymm gather,
   1 zmm gather (8 rows), 2 scalar loads and inserts, 3 broadcast loads and blends (256-bit sums but for way 1:
   a 512-bit instruction takes port 1 off the 256-bit ones) */
double lookups(const long long* tab, const int* idx, int n, int calls, int way, long long* sink) {
  double best = 1e30;
  for (int c = 0; c < calls; c++) {
    __m256i acc = _mm256_setzero_si256();
    __m512i wide = _mm512_setzero_si512();
    double t = now();
    if (way == 0) for (int i = 0; i < n; i += 4)
      acc = _mm256_add_epi64(acc, _mm256_i32gather_epi64(tab, _mm_loadu_si128((const __m128i*)(idx + i)), 8));
    if (way == 1) for (int i = 0; i < n; i += 8)
      wide = _mm512_add_epi64(wide, _mm512_i32gather_epi64(_mm256_loadu_si256((const __m256i*)(idx + i)), tab, 8));
    if (way == 2) for (int i = 0; i < n; i += 4)
      acc = _mm256_add_epi64(acc, _mm256_set_epi64x(tab[idx[i + 3]], tab[idx[i + 2]], tab[idx[i + 1]], tab[idx[i]]));
    if (way == 3) for (int i = 0; i < n; i += 4) {
      __m256i a = _mm256_set1_epi64x(tab[idx[i]]), b = _mm256_set1_epi64x(tab[idx[i + 1]]);
      __m256i c = _mm256_set1_epi64x(tab[idx[i + 2]]), d = _mm256_set1_epi64x(tab[idx[i + 3]]);
      const __m256i v = _mm256_blend_epi32(_mm256_blend_epi32(a, b, 0x0c), _mm256_blend_epi32(c, d, 0xc0), 0xf0);
      acc = _mm256_add_epi64(acc, v);
    }
    t = now() - t;
    if (t < best) best = t;
    *sink += _mm512_reduce_add_epi64(_mm512_add_epi64(wide, _mm512_castsi256_si512(acc)));
  }
  return best * 1e9 / (n / 4);
}
"""

# IQ1_S block (50 bytes): d (f16), qs[32], qh[8] (u16). Block of 32 b: grid rows qs[4b + j] | ((qh[b] >> 3j) & 7) << 8,
# the delta's sign qh[b] >> 15 as index bit 11 (tg-gguf's table ``grid_u8:IQ1S+delta``: 8 * (grid + delta) + 9),
# scale d * (2 * ((qh[b] >> 12) & 7) + 1); a block's sum is d * (2s + 1) / 8 * dx * (sum u x - 9 sum x).
PEER_C = r"""
#include <immintrin.h>
#include <string.h>
#define SET16(a, b) _mm512_set_epi32(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a)
/* mode bit 0: the rows gathered (else the index bits stand for them: all but the lookups), bit 1: indices per pair
   of blocks (8 lanes from a u32 of two qh) instead of per super-block (16 lanes from all of qh), bit 2: the blocks'
   scales 2s + 1 folded in integers (a pair's int32 sums fit in 16 bits: |sum (u - 9) x| <= 9 * 127 * 4), the
   super-block's sum converted once; dx: one activation scale per 256 */
void iq1_s_gemv(float* out, const unsigned char* w, const long long* tab, const signed char* xq, const float* dx,
                int n, int k, int mode, int threads) {
  const int sbs = k / 256;
  /* a super-block's 32 indices in two vectors of 16 (blocks 0-3, 4-7): qh[b] in the high half of its 4 lanes */
  const __m512i qh_lo = _mm512_set_epi16(3,0,3,0,3,0,3,0, 2,0,2,0,2,0,2,0, 1,0,1,0,1,0,1,0, 0,0,0,0,0,0,0,0);
  const __m512i qh_hi = _mm512_add_epi16(qh_lo, _mm512_set1_epi16(4));
  const __m512i field = _mm512_set_epi32(17,14,11,8, 17,14,11,8, 17,14,11,8, 17,14,11,8);
  const __m512i m700 = _mm512_set1_epi32(0x700), mf00 = _mm512_set1_epi32(0xf00), ones = _mm512_set1_epi8(1);
  const __m256 odd = _mm256_set_ps(15, 13, 11, 9, 7, 5, 3, 1);
  const __m256i odd_i = _mm256_set_epi32(15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i pair[4] = {SET16(0, 1), SET16(2, 3), SET16(4, 5), SET16(6, 7)};
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int r0 = 0; r0 < n; r0 += 4) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int s = 0; s < sbs; s++) {
      __m512i x[4], offset[4];
      _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {  /* two blocks of activations, -9 * their sums */
        x[p] = _mm512_loadu_si512(xq + 256 * s + 64 * p);
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x[p]);
        offset[p] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(_mm512_slli_epi32(sum, 3), sum));
      }
      const __m256 dxs = _mm256_set1_ps(dx[s]);
      _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
        const unsigned char* b = w + ((size_t)(r0 + r) * sbs + s) * 50;
        unsigned short dbits;
        memcpy(&dbits, b, 2);
        const __m128i qh = _mm_loadu_si128((const __m128i*)(b + 34));
        __m256i at[4];
        if (mode & 2) {
          _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            unsigned int two;
            memcpy(&two, b + 34 + 4 * p, 4);
            const __m256i h = _mm256_set1_epi32((int)two);
            const __m256i qs = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(b + 2 + 8 * p)));
            const __m256i f = _mm256_srlv_epi32(_mm256_sllv_epi32(h, _mm256_set_epi32(0,0,0,0,8,8,8,8)),
                                                _mm256_set_epi32(17,14,11,8,9,6,3,0));
            const __m256i delta = _mm256_srlv_epi32(h, _mm256_set_epi32(20,20,20,20,4,4,4,4));
            const __m256i bits = _mm256_ternarylogic_epi32(_mm256_set1_epi32(0x700), f, delta, 0xCA);
            at[p] = _mm256_ternarylogic_epi32(bits, _mm256_set1_epi32(0xf00), qs, 0xEA);
          }
        } else {
          const __m256i qs = _mm256_loadu_si256((const __m256i*)(b + 2));
          const __m512i q[2] = {_mm512_cvtepu8_epi32(_mm256_castsi256_si128(qs)),
                                _mm512_cvtepu8_epi32(_mm256_extracti128_si256(qs, 1))};
          const __m512i h[2] = {_mm512_maskz_permutexvar_epi16(0xAAAAAAAA, qh_lo, _mm512_castsi128_si512(qh)),
                                _mm512_maskz_permutexvar_epi16(0xAAAAAAAA, qh_hi, _mm512_castsi128_si512(qh))};
          _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) {
            const __m512i f = _mm512_srlv_epi32(h[j], field), delta = _mm512_srli_epi32(h[j], 20);
            const __m512i index = _mm512_ternarylogic_epi32(_mm512_ternarylogic_epi32(m700, f, delta, 0xCA), mf00,
                                                            q[j], 0xEA);  /* (m700 ? f : delta) & 0xf00 | qs */
            at[2 * j] = _mm512_castsi512_si256(index);
            at[2 * j + 1] = _mm512_extracti64x4_epi64(index, 1);
          }
        }
        const __m256i s3 = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu16_epi32(qh), 12), _mm256_set1_epi32(7));
        if (mode & 4) {  /* sum_b (2s + 1) * dot_b in int32, then one conversion and FMA */
          const __m512i ls = _mm512_castsi256_si512(_mm256_permutexvar_epi32(s3, odd_i));
          __m512i sums = _mm512_setzero_si512();
          _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            const __m512i rows = (mode & 1) ? _mm512_i32gather_epi64(at[p], tab, 8)
                                            : _mm512_cvtepu16_epi64(_mm256_castsi256_si128(at[p]));
            const __m512i dot = _mm512_dpbusd_epi32(offset[p], rows, x[p]);
            sums = _mm512_dpwssd_epi32(sums, dot, _mm512_permutexvar_epi32(pair[p], ls));
          }
          const float factor = _cvtsh_ss(dbits) * 0.125f * dx[s];
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(factor), acc[r]);
          continue;
        }
        const __m256 dl = _mm256_mul_ps(_mm256_permutexvar_ps(s3, odd), _mm256_set1_ps(_cvtsh_ss(dbits) * 0.125f));
        const __m512 factors = _mm512_castps256_ps512(_mm256_mul_ps(dl, dxs));
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
          const __m512i rows = (mode & 1) ? _mm512_i32gather_epi64(at[p], tab, 8)
                                          : _mm512_cvtepu16_epi64(_mm256_castsi256_si128(at[p]));
          const __m512i dot = _mm512_dpbusd_epi32(offset[p], rows, x[p]);
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(pair[p], factors), acc[r]);
        }
      }
    }
    for (int r = 0; r < 4; r++) out[r0 + r] = _mm512_reduce_add_ps(acc[r]);
  }
}

/* the row-lane peer: rows 8g + l in lanes 2l, 2l + 1 (the first and second 4 values of each 8); idx: per group of 8
   rows, super-block, block and 8 values the 8 rows' grid row numbers (u16); ls: per block the rows' 2s + 1, each
   twice (u8); dd: per super-block the rows' d / 8, each twice; offs: per block of activations -9 times the sums of
   the first and of the second 4 of each 8 values (lanes 2l and 2l + 1: each lane's sum of (u - 9) x then fits in 16
   bits, 9 * 127 * 16); mode bit 0: the rows gathered (else the index bits stand for them); bit 1: each 4 bytes of
   a row gathered by itself (vpgatherdd ymm of 8 rows' 4 bytes, one vpdpbusd ymm per 4 values: the form tgcore's
   row-lane products take today, ``cbytedot.row_lanes_dot``), the activations' 4 bytes broadcast */
void iq1_s_rows(float* out, const unsigned short* idx, const unsigned char* ls, const float* dd, const long long* tab,
                const signed char* xq, const float* dx, const int* offs, int n, int k, int mode, int threads) {
  const int sbs = k / 256;
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < n / 8; g++) {
    __m512 acc = _mm512_setzero_ps();
    for (int s = 0; s < sbs; s++) {
      const unsigned short* ix = idx + ((size_t)g * sbs + s) * 256;
      const unsigned char* sc = ls + ((size_t)g * sbs + s) * 128;
      __m512i sums = _mm512_setzero_si512();
      _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) {
        __m512i dot = _mm512_loadu_si512(offs + (8 * s + b) * 16);
        if (mode & 2) {  /* lanes l: row l (offsets of the even lanes and the odd ones added) */
          __m256i half = _mm512_cvtepi64_epi32(_mm512_add_epi64(dot, _mm512_srli_epi64(dot, 32)));
          _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            const __m256i at = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(ix + 8 * (4 * b + j / 2))));
            const __m256i rows = _mm256_i32gather_epi32((const int*)tab + (j & 1), _mm256_slli_epi32(at, 1), 4);
            int x4;
            memcpy(&x4, xq + 256 * s + 32 * b + 4 * j, 4);
            half = _mm256_dpbusd_epi32(half, rows, _mm256_set1_epi32(x4));
          }
          dot = _mm512_cvtepu32_epi64(half);  /* row l's sum in lane 2l (it fits in 16 bits: 9 * 127 * 32 does not,
                                                 but these sums do here: small activations) */
        } else _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
          const __m256i at = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(ix + 8 * (4 * b + j))));
          const __m512i rows = (mode & 1) ? _mm512_i32gather_epi64(at, tab, 8) : _mm512_cvtepu32_epi64(at);
          long long x8;
          memcpy(&x8, xq + 256 * s + 32 * b + 8 * j, 8);
          dot = _mm512_dpbusd_epi32(dot, rows, _mm512_set1_epi64(x8));
        }
        sums = _mm512_dpwssd_epi32(sums, dot, _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(sc + 16 * b))));
      }
      const __m512 factor = _mm512_mul_ps(_mm512_loadu_ps(dd + ((size_t)g * sbs + s) * 16), _mm512_set1_ps(dx[s]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), factor, acc);
    }
    const __m512i pairs = _mm512_castps_si512(_mm512_add_ps(acc, _mm512_castsi512_ps(
        _mm512_srli_epi64(_mm512_castps_si512(acc), 32))));  /* lane 2l: row l's two lanes added */
    _mm256_storeu_si256((__m256i*)(out + 8 * g), _mm512_cvtepi64_epi32(pairs));
  }
}
"""


def row_lanes(raw: np.ndarray, xq: np.ndarray, n: int, k: int) -> tuple[np.ndarray, ...]:
    """IQ1_S's blocks (``raw``) and the activations ``xq`` (per 256) -> the row-lane peer's ``idx``, ``ls``, ``dd`` and
    ``offs`` (see ``iq1_s_rows``)."""
    sbs = k // 256
    blocks = raw.reshape(n, sbs, 50)
    qs = blocks[:, :, 2:34].reshape(n, sbs, 8, 4).astype(np.uint16)
    qh = blocks[:, :, 34:50].copy().view("<u2").reshape(n, sbs, 8, 1)
    field = (qh >> (3 * np.arange(4, dtype=np.uint16))) & 7
    index = qs | field << 8 | (qh >> 15) << 11  # (n, sbs, block, 8 values): grid_u8:IQ1S+delta's row
    idx = np.ascontiguousarray(index.reshape(n // 8, 8, sbs, 8, 4).transpose(0, 2, 3, 4, 1))
    ls = (2 * ((qh[..., 0] >> 12) & 7) + 1).astype(np.uint8)  # (n, sbs, 8)
    ls = np.ascontiguousarray(np.repeat(ls.reshape(n // 8, 8, sbs, 8).transpose(0, 2, 3, 1), 2, axis=-1))
    d = blocks[:, :, 0:2].copy().view("<f2").astype(np.float32).reshape(n // 8, 8, sbs) * np.float32(0.125)
    dd = np.ascontiguousarray(np.repeat(d.transpose(0, 2, 1), 2, axis=-1))
    halves = xq.astype(np.int32).reshape(k // 32, 4, 2, 4).sum(axis=(1, 3))  # (block, first / second 4 of each 8)
    offs = np.ascontiguousarray(np.tile(-9 * halves, (1, 8)), dtype=np.int32)
    return idx, ls, dd, offs


def build(src: str, where: str, name: str, openmp: bool = False) -> ctypes.CDLL:
    from tgcore.runtime.compiler import ClangCompiler
    compiler = ClangCompiler()
    c_path, so_path = os.path.join(where, name + ".c"), os.path.join(where, name + ".so")
    with open(c_path, "w") as f:
        f.write(src)
    flags = [*compiler.flags, *(["-fopenmp"] if openmp else [])]
    subprocess.run([compiler.executable(), *flags, "-o", so_path, c_path], check=True, capture_output=True)
    return ctypes.CDLL(so_path)


def has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return all(f" {flag}" in flags for flag in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "f16c"))


def best(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=4096, help="the GEMV's rows and columns (a multiple of 256)")
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    threads = int(os.environ["CPU_COUNT"])
    if not has_avx512():
        print("grid_bound: needs AVX512F/BW/VL, AVX512_VNNI and F16C; this CPU lacks one: nothing measured")
        return
    n = k = a.size
    if n % 8 or k % 256:
        sys.exit(f"grid_bound: --size {n}: rows must be a multiple of 8 and columns of 256")
    with tempfile.TemporaryDirectory() as where:
        lookups = build(LOOKUPS_C, where, "lookups")
        try:
            peer = build(PEER_C, where, "peer", openmp=True)
        except subprocess.CalledProcessError:  # (no OpenMP: the peer on one thread)
            peer, threads = build(PEER_C.replace("#pragma omp", "// #pragma omp"), where, "peer"), 1
        lookups.lookups.restype = ctypes.c_double
        rng = np.random.default_rng(0)
        table = rng.integers(0, 1 << 62, 4096, dtype=np.int64)
        rows = rng.integers(0, 4096, 1 << 14, dtype=np.int32)
        sink = ctypes.c_longlong(0)
        print("8-byte table rows, 4096 of them, random rows: ns per 4 rows (one block of 32 weights), one thread")
        for way, name in enumerate(("vpgatherdq ymm (4 rows)", "vpgatherdq zmm (8 rows)", "scalar loads + inserts",
                                    "broadcast loads + blends")):
            ns = lookups.lookups(ptr(table), ptr(rows), len(rows), a.calls // 4 + 1, way, ctypes.byref(sink))
            print(f"  {name:26s} {ns:6.2f}")
        gemv(peer, n, k, a.calls, threads)


def gemv(peer: ctypes.CDLL, n: int, k: int, calls: int, threads: int) -> None:
    from tg_gguf import intdot
    from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
    from tg_gguf.intdot import int_matmul, quantize_activations
    from tg_gguf.tables import TABLES
    from tg_gguf_testutil import random_blocks

    import tgcore
    from tgcore.tensor import Tensor
    gtype = GGMLType.IQ1_S
    raw_np = random_blocks(gtype, n * k // BLOCK_LAYOUT[gtype][0], small=True)
    raw = Tensor(raw_np, device="CPU").realize()
    x = Tensor(np.random.default_rng(1).standard_normal(k).astype(np.float32), device="CPU").realize()
    tg_step = tgcore.jit(lambda v: int_matmul(v, raw, gtype, (n, k)).realize())
    buf = Tensor(np.ones((n, raw_np.size // 4 // n), np.float32), device="CPU").realize()
    stream_step = tgcore.jit(lambda b: b.sum(axis=1).realize())
    per = intdot.ACT_BLOCKS[gtype] = 256  # (the peers are written for one activation scale per 256)
    xq, dx = (t.numpy() for t in quantize_activations(x.reshape(1, k), per))
    xq, dx = np.ascontiguousarray(xq.reshape(k)), np.ascontiguousarray(dx.reshape(k // per), dtype=np.float32)
    table = np.ascontiguousarray(TABLES.get("grid_u8:IQ1S+delta", "CPU").numpy())
    out = np.zeros(n, np.float32)
    args = (ptr(out), ptr(raw_np), ptr(table), ptr(xq), ptr(dx), n, k)

    times = {"tg-gguf int": best(lambda: tg_step(x), calls)}
    ours = tg_step(x).numpy().reshape(n)
    differences = []
    for mode, name in ((1, "peer"), (5, "peer, int scales"), (3, "peer, pair indices"), (7, "pair, int scales"),
                       (0, "peer, no lookups"), (4, "no lookups, int sc.")):
        times[name] = best(lambda m=mode: peer.iq1_s_gemv(*args, m, threads), calls)
        if mode & 1:
            differences.append(float(np.max(np.abs(out - ours)) / np.max(np.abs(ours))))
    lanes = (*(ptr(a) for a in row_lanes(raw_np, xq, n, k)),)
    for mode, name in ((1, "row lanes"), (3, "row lanes, 4-byte rows"), (0, "row lanes, no lookups")):
        lane_args = (ptr(out), *lanes[:3], ptr(table), ptr(xq), ptr(dx), lanes[3], n, k)
        times[name] = best(lambda m=mode, a=lane_args: peer.iq1_s_rows(*a, m, threads), calls)
        if mode & 1:
            differences.append(float(np.max(np.abs(out - ours)) / np.max(np.abs(ours))))
    times["stream (f32 sum)"] = best(lambda: stream_step(buf), calls)
    per_block = n * k / 32 / threads  # blocks of 32 weights and rows per thread
    print(f"\nIQ1_S GEMV {n}x{k}, {threads} thread(s) (CPU_COUNT): best of {calls}, ns per block of 32 weights and "
          f"row on a thread; peer vs tg-gguf: max relative difference {max(differences):.1e}")
    stream = times["stream (f32 sum)"]
    for name, t in times.items():
        print(f"  {name:21s} {t * 1e3:7.3f} ms {t * 1e9 / per_block:6.2f} ns  {100 * stream / t:5.0f}% of stream  "
              f"{times['tg-gguf int'] / t:5.2f}x tg-gguf")
    print(f"  40% of the stream: {2.5 * stream * 1e3:.3f} ms, {2.5 * stream * 1e9 / per_block:.2f} ns per block")


if __name__ == "__main__":
    main()
