"""What one more activation row costs a batched product kernel, measured on its generated C alone. Prints; asserts
nothing.

    python plugins/tg-llm/bench/product_rows.py [--model FILE.gguf] [--rows 1,4,8] [--shape 3072_576]
                                                [--stream-mib 66] [--reps 60] [--rounds 4]

For each row count N the model decodes one step of N sequences while the kernels it builds are recorded; the product
``r_N_<shape>`` (``r_<shape>`` at one row) is then compiled alone with the CPU device's compiler flags into a small
C program that calls it as the runtime does (one call per core_id, on one or two threads) and reads each calling
thread's CPU time, so other processes' load costs less than in wall time. Two settings:
  - "in L2": one copy of the weights, so the kernel's own instruction throughput (compute);
  - "streamed": copies of every input of 64 KiB or more filling ``--stream-mib`` (the model's products are 66 MB),
    called in turn, so the weights come from L3 or memory as in a decode step.
Rounds alternate the row counts (interleaved); each figure is the median over rounds of each round's median call
time (one thread: both halves; two threads: thread 0's half). The last column compares with the first row count.
``--ahead-scale F`` adds, for each row count above one, the same kernel with its prefetch distances times F (rows
"N*"), timed in the same rounds: a prefetch rule tried without changing the code generator.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

MAIN = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double cpu_now(void) {
  struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void* fresh(size_t n) {  /* 2 MiB pages where the kernel grants them (the runtime's weights are in such) */
  size_t huge = 2u << 20, size = (n + huge - 1) / huge * huge; void* p = aligned_alloc(huge, size);
  madvise(p, size, MADV_HUGEPAGE); unsigned short* h = p; unsigned x = 2463534242u;
  for (size_t i = 0; i < size / 2; i++) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5; h[i] = (unsigned short)(0x2000 + (x & 0x0fff)); }
  return p; }  /* (as float16: small finite values; as bytes: anything) */
static int copies, threads, reps; static pthread_barrier_t bar; static double took[100000];
%(decls)s
static void* worker(void* arg) { int id = (int)(long)arg;
  for (int r = 0; r < reps; r++) { double sum = 0;
    for (int c = 0; c < copies; c++) { double t0 = cpu_now();
      if (threads == 1) { %(call0)s; %(call1)s; } else { %(callid)s; }
      sum += cpu_now() - t0; if (threads > 1) pthread_barrier_wait(&bar); }
    if (id == 0) took[r] = sum / copies; }
  return 0; }
static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
int main(int argc, char** argv) { if (argc != 4) return 2;
  copies = atoi(argv[1]); threads = atoi(argv[2]); reps = atoi(argv[3]);
  if (reps < 1 || reps > 100000 || copies < 1 || threads < 1 || threads > 2) return 2;
%(allocs)s
  pthread_barrier_init(&bar, 0, threads); pthread_t other;
  if (threads > 1) pthread_create(&other, 0, worker, (void*)1L);
  worker(0); if (threads > 1) pthread_join(other, 0);
  qsort(took, reps, sizeof(double), cmp); printf("%%.3f\n", took[reps / 2] * 1e6); return 0; }
"""


def kernel_sources(model: Any, rows: list[int]) -> dict[str, Any]:
    """name -> ProgramSpec of every kernel built while the model prefills and decodes one step of each row count
    (generated anew: ``DEBUG=4`` skips the stored programs, which keep no linear program to read the buffers' sizes
    from; its printing is dropped). A kernel built once is not built again (a prompt's product is a batch's)."""
    import contextlib
    import io

    from tgcore.engine import realize
    from tgcore.helpers import Context
    built: dict[str, Any] = {}
    build = realize.build_program

    def recording(dev: Any, spec: Any, disk_cache: bool = True) -> Any:
        built[spec.name] = spec
        return build(dev, spec, disk_cache)
    realize.build_program = recording  # type: ignore[assignment]
    try:
        with Context(DEBUG=4), contextlib.redirect_stdout(io.StringIO()):
            for n in rows:
                model.reset()
                for s in range(n):
                    model.forward_last([100 + s, 200, 201, 202], 0, seq=s)
                model.decode([(s, 500 + s, 4) for s in range(n)])
    finally:
        realize.build_program = build  # type: ignore[assignment]
    return built


def harness(spec: Any, stream_bytes: int) -> tuple[str, int]:
    """(C source of the program timing ``spec``'s kernel, copies of its big inputs that fill ``stream_bytes``)."""
    from tgcore.uop import Ops
    params = sorted((u for u in spec.uops if u.op is Ops.PARAM), key=lambda u: u.arg)
    sizes = [u.dtype.size * u.dtype.base.itemsize for u in params]  # (a pointer dtype's own itemsize is 8)
    big = [n >= 1 << 16 for n in sizes]
    per_copy = sum(n for n, b in zip(sizes, big, strict=True) if b)
    copies = max(1, stream_bytes // max(per_copy, 1))
    decls = "\n".join(f"static void* buf{i}[%d];" % (copies if b else 1) for i, b in enumerate(big))
    allocs = "\n".join(f"  for (int c = 0; c < {copies if b else 1}; c++) buf{i}[c] = fresh({n});"
                       for i, (n, b) in enumerate(zip(sizes, big, strict=True)))
    sig = re.search(rf"void {spec.name}\(([^)]*)\)", spec.src)
    assert sig is not None and sig.group(1).endswith("int core_id"), "a CPU kernel takes core_id last"
    args = ", ".join(f"buf{i}[{'c' if b else 0}]" for i, b in enumerate(big))
    call = lambda core: f"{spec.name}({args}, {core})"  # noqa: E731
    src = spec.src + MAIN % {"decls": decls, "allocs": allocs, "call0": call(0), "call1": call(1),
                             "callid": call("id")}
    return src, copies


def scaled_prefetch(src: str, scale: float) -> str:
    """``src`` with each ``__builtin_prefetch(&p[i+D]...)`` distance D times ``scale`` (whole elements)."""
    return re.sub(r"(__builtin_prefetch\(&\w+\[\w+\+)(\d+)\]",
                  lambda m: f"{m.group(1)}{max(1, round(int(m.group(2)) * scale))}]", src)


def build(src: str, out: Path) -> None:
    from tgcore.runtime.compiler import ClangCompiler
    flags = [f for f in ClangCompiler().flags if f != "-shared"]
    subprocess.run(["cc", *flags, "-x", "c", "-", "-o", str(out), "-pthread"], input=src.encode(), check=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the bundled SmolLM2 Q4_1)")
    p.add_argument("--rows", default="1,4,8", help="row counts, comma-separated (default 1,4,8)")
    p.add_argument("--shape", default="3072_576", help="the product's shape in its kernel name (default 3072_576)")
    p.add_argument("--stream-mib", type=int, default=66, help="MiB of weights the streamed setting cycles through")
    p.add_argument("--reps", type=int, default=40, help="passes over the copies per round (default 40)")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    p.add_argument("--ahead-scale", type=float, default=None,
                   help="also time the kernels of several rows with their prefetch distances times this")
    args = p.parse_args()
    from tg_llm.cli import model_path
    from tg_llm.model import Model
    rows = sorted({int(r) for r in args.rows.split(",")})
    model = Model.from_gguf(model_path(args.model), device="CPU", max_context=512, sequences=max(rows))
    print(f"{args.shape}, load average {os.getloadavg()[0]:.1f}")
    exes: dict[str, tuple[Path, int]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="product_rows"))
    built = kernel_sources(model, rows)
    for n in rows:
        name = f"r_{args.shape}" if n == 1 else f"r_{n}_{args.shape}"
        spec = built.get(name)
        if spec is None:
            raise SystemExit(f"no kernel {name} in a {n}-row decode step (try --shape as in batch_step.py's names)")
        src, copies = harness(spec, args.stream_mib << 20)
        build(src, tmp / name)
        exes[str(n)] = (tmp / name, copies)
        if args.ahead_scale is not None and n > 1:
            build(scaled_prefetch(src, args.ahead_scale), tmp / f"{name}_scaled")
            exes[f"{n}*"] = (tmp / f"{name}_scaled", copies)
    settings = [("in L2", 1, 1), ("in L2", 1, 2), ("streamed", 0, 1), ("streamed", 0, 2)]
    runs: dict[tuple[str, int, int], list[float]] = {}
    for _ in range(args.rounds):
        for label, one_copy, threads in settings:
            for key, (exe, copies) in exes.items():
                out = subprocess.run([str(exe), str(1 if one_copy else copies), str(threads), str(args.reps)],
                                     capture_output=True, text=True, check=True).stdout
                runs.setdefault((label, threads, key), []).append(float(out))
    print(f"  {'setting':10s} {'threads':>7s} {'rows':>4s} {'us/call':>9s} {'x first':>8s} {'per added row':>13s}")
    for label, _, threads in settings:
        first = statistics.median(runs[(label, threads, str(rows[0]))])
        for key in exes:
            n = int(key.rstrip("*"))
            t = statistics.median(runs[(label, threads, key)])
            added = f"{(t - first) / (n - rows[0]):.2f}" if n > rows[0] else ""
            print(f"  {label:10s} {threads:7d} {key:>4s} {t:9.2f} {t / first:7.2f}x {added:>13s}")


if __name__ == "__main__":
    main()
