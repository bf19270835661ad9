"""The AMD emulator's throughput and the WMMA GEMMs' instruction mix. Prints figures; asserts nothing.

  1. emulator throughput: instructions/s on the GEMMs (gfx1200, gfx1100; 256^3 and 384^3) and on a
     scalar+vector ALU loop, with numpy's own matmul time of the same product for scale
  2. the GEMM's instruction mix, executed (dynamic) counts: WMMA share of all instructions, LDS and global
     memory instructions and bytes per WMMA, barriers and waits per K block
  3. asm_gemm through Tensor code on AMD:EMU next to calling the emulator directly (framework overhead)

Nothing here says anything about hardware speed: we have no AMD GPU, and the emulator does not model
timing. Run: python plugins/tg-amd/bench/amd.py [--quick]
"""
from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np
import tg_amd
from tg_amd.emulator import Program, RunStats
from tg_amd.kernels.gemm import BK, gemm_kernel

CLASSES = {   # mnemonic prefix -> class, first match wins
    "v_wmma": "WMMA", "ds_load": "LDS load", "ds_store": "LDS store", "global_load": "global load",
    "global_store": "global store", "s_load": "scalar load", "s_wait": "wait", "s_barrier": "barrier",
    "v_": "VALU", "s_": "SALU",
}
WIDTH = {"b128": 16, "b96": 12, "b64": 8, "b32": 4, "b16": 2, "u16": 2, "i16": 2, "b8": 1, "u8": 1}


def classify(name: str) -> str:
    return next(cls for prefix, cls in CLASSES.items() if name.startswith(prefix))


def access_bytes(name: str) -> int:
    return next((n for suffix, n in WIDTH.items() if f"_{suffix}" in name), 4)


def run_gemm(m: int, n: int, k: int, arch: str) -> tuple[RunStats, float]:
    kern = gemm_kernel(m, n, k, arch)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    prog = Program(kern.code, arch)
    stats = prog.run([c, a, b], kern.global_size, kern.local_size)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    best = float("inf")
    for _ in range(5):   # best of 5: the machine may be shared
        start = time.perf_counter()
        a32 @ b32
        best = min(best, time.perf_counter() - start)
    return stats, best


def alu_loop(arch: str, iterations: int = 2000) -> RunStats:
    add = "s_add_co_i32" if arch != "gfx1100" else "s_add_i32"
    body = "\n".join(f"v_add_nc_u32 v{i}, v{i}, v{i + 1}\nv_mul_f32 v{i + 20}, v{i + 20}, v{i + 21}" for i in range(8))
    code = tg_amd.assemble(f"s_mov_b32 s1, {iterations}\nloop:\n{body}\n{add} s1, s1, -1\ns_cmp_lg_u32 s1, 0\n"
                           "s_cbranch_scc1 loop\ns_endpgm", arch)
    prog = Program(code, arch)
    start, cpu_start = time.perf_counter(), time.process_time()
    waves = prog.run_wave({i: np.ones(32, np.uint32) for i in range(40)})
    stats = RunStats(instructions=iterations * 19 + 2, waves=len(waves))
    stats.seconds, stats.cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return stats


def throughput(quick: bool) -> None:
    print("1. emulator throughput (instructions executed per second of emulation; CPU time of this process,")
    print("   wall clock in brackets: the machine may be shared)")
    print(f"   {'kernel':28s} {'instructions':>12s} {'cpu s':>6s} {'inst/s':>9s} {'(wall inst/s)':>14s} {'waves':>6s}"
          f" {'numpy matmul':>13s} {'emulator/numpy':>15s}")
    print("   (numpy: float32 matmul of the same inputs, best of 5 wall-clock runs)")
    sizes = [256] if quick else [256, 384]
    for arch in ("gfx1200", "gfx1100"):
        for size in sizes:
            stats, numpy_s = run_gemm(size, size, size, arch)
            print(f"   gemm {size}^3 {arch:15s} {stats.instructions:12d} {stats.cpu_seconds:6.2f} "
                  f"{stats.instructions / stats.cpu_seconds:9.0f} ({stats.instructions / stats.seconds:12.0f}) "
                  f"{stats.waves:6d} {numpy_s * 1e3:10.2f} ms {stats.cpu_seconds / max(numpy_s, 1e-9):14.0f}x")
        loop = alu_loop(arch)
        print(f"   ALU loop {arch:19s} {loop.instructions:12d} {loop.cpu_seconds:6.2f} "
              f"{loop.instructions / loop.cpu_seconds:9.0f} ({loop.instructions / loop.seconds:12.0f}) {loop.waves:6d}")


def mix(size: int) -> None:
    print(f"\n2. GEMM instruction mix, executed, {size}^3 (all waves)")
    for arch in ("gfx1200", "gfx1100"):
        stats, _ = run_gemm(size, size, size, arch)
        by_class: Counter[str] = Counter()
        nbytes: Counter[str] = Counter()
        for name, count in stats.by_name.items():
            base = name.split(" :: ")[0]
            cls = classify(base)
            by_class[cls] += count
            if cls in ("LDS load", "LDS store", "global load", "global store"):
                nbytes[cls] += count * 32 * access_bytes(base)   # 32 lanes
        wmma = by_class["WMMA"]
        blocks = stats.waves * (size // BK)
        print(f"   {arch}: {stats.instructions} instructions, {wmma} WMMA = {100 * wmma / stats.instructions:.1f}%"
              f" of all; per K block of {BK} per wave: {stats.instructions / blocks:.1f} instructions")
        for cls in ("WMMA", "LDS load", "LDS store", "global load", "global store", "VALU", "SALU", "wait",
                    "barrier", "scalar load"):
            extra = f"  {nbytes[cls] / wmma:7.1f} bytes/WMMA" if cls in nbytes else ""
            print(f"     {cls:13s} {by_class[cls]:8d}  {by_class[cls] / wmma:6.3f} per WMMA{extra}")
        flops = 2 * size ** 3
        print(f"     arithmetic intensity: {flops / (nbytes['global load'] + nbytes['global store']):.1f} "
              f"flop per global byte; {flops / (nbytes['LDS load'] + nbytes['LDS store']):.1f} flop per LDS byte")


def through_tensors(size: int) -> None:
    from tgcore.tensor import Tensor
    print(f"\n3. asm_gemm from Tensor code on AMD:EMU vs the emulator alone, {size}^3, gfx1200")
    rng = np.random.default_rng(1)
    a = Tensor(rng.standard_normal((size, size)).astype(np.float32), device="AMD:EMU").realize()
    b = Tensor(rng.standard_normal((size, size)).astype(np.float32), device="AMD:EMU").realize()
    tg_amd.asm_gemm(a, b).realize()   # compile once
    start = time.process_time()
    tg_amd.asm_gemm(a, b).realize()
    tensor_s = time.process_time() - start
    stats, _ = run_gemm(size, size, size, "gfx1200")
    print(f"   Tensor path {tensor_s:.2f} cpu s (casts to f16 in the interpreter + the kernel), emulator alone "
          f"{stats.cpu_seconds:.2f} cpu s, ratio {tensor_s / stats.cpu_seconds:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="256^3 only")
    args = parser.parse_args()
    throughput(args.quick)
    mix(256)
    through_tensors(256)


if __name__ == "__main__":
    main()
