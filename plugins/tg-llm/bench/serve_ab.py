"""Interleaved A/B of ``tg serve llm`` run from two or more source trees (main's and a branch's). Prints only.

    python plugins/tg-llm/bench/serve_ab.py --trees /work/main,/work/wt/NAME [--streams 1,4,8] [--rounds 6]
                                            [--prompt-tokens 128] [--gen-tokens 64] [--parallel 8]
                                            [--warm-wait 300] [--engine-steps]

One server per tree (its ``PYTHONPATH`` the tree and its ``plugins/*``), all started at once and left to make their
idle captures (``--warm-wait``), warmed up with one round of the most streams. Then ``--rounds`` rounds: each stream
count in turn, the servers one after the other (the order reversed every round), so the machine's load falls on all
of them alike. Each round of N streams (as ``bench/serve.py``'s) gives the worker's mean decode step, a stream's
decode rate and its share (the rate times the mean step: the part of a stream's span its own steps took), and from
``/proc`` the CPU seconds of the server's event-loop thread (its main thread: HTTP, SSE) and of its other threads
(the model's worker and the kernel pool) and their involuntary context switches, and this process's CPU seconds (the
openai client's threads). With ``--engine-steps``, the engine's N-row step alone at the same positions (this
process, this ``PYTHONPATH``'s code) after each round of N streams.

The summary: per tree the medians over the rounds, a step's cost at N rows against one row and decode summed over
the streams against one stream (per-round ratios, then their median), and each tree's step against the first tree's
in the same round (median). Single rounds vary by 10% and more on a shared machine: read the medians. Under other
processes' load the engine's steps alone, run back to back, take the preemptions that the server's steps leave to
the host work between them (a 1 ms sleep between the engine's steps made them 3-6% faster at load 13): beside the
server's they read high there; quiet, they compare like with like.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import serve  # (this folder: a script's own folder is on sys.path)


def tree_env(tree: Path) -> dict[str, str]:
    """This environment with ``PYTHONPATH`` the tree and its plugins (their entry points are the installed ones)."""
    plugins = sorted(str(p) for p in (tree / "plugins").glob("tg-*") if p.is_dir())
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), *plugins])}


def thread_times(pid: int) -> dict[int, tuple[float, int]]:
    """CPU seconds (user + system) and involuntary context switches of each thread of process ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            status = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:  # (a thread that ended meanwhile)
            continue
        switches = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
        out[int(tid)] = ((int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK"), switches)
    return out


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Server:
    """``tg serve llm`` from one tree on a free loopback port, with an openai client."""

    def __init__(self, tree: Path, model: Path, args: argparse.Namespace) -> None:
        self.tree = tree
        port = serve.free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tgcore.cli", "serve", "llm", "--model", str(model), "--port", str(port),
             "--max-context", str(args.max_context), "--parallel", str(args.parallel), "--log-level", "warning"],
            stdin=subprocess.DEVNULL, env=tree_env(tree))
        self.client: Any = None
        self.model = ""

    def connect(self) -> None:
        import openai
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        self.model = self.client.models.list().data[0].id

    def round(self, n: int, args: argparse.Namespace) -> dict[str, float]:
        """One round of ``n`` streams: the figures of the module doc."""
        worker, threads, cpu = serve.worker_figures(self.url), thread_times(self.proc.pid), own_cpu()
        r = serve.concurrent(self.client, self.model, n, args.prompt_tokens, args.gen_tokens)
        cpu = own_cpu() - cpu
        after, threads_after = serve.worker_figures(self.url), thread_times(self.proc.pid)
        step = (after["decode"] - worker["decode"]) / max(after["decode_steps"] - worker["decode_steps"], 1.0)
        moved = {t: (c - threads.get(t, (0.0, 0))[0], s - threads.get(t, (0.0, 0))[1])
                 for t, (c, s) in threads_after.items()}
        loop = moved.get(self.proc.pid, (0.0, 0))
        others = [v for t, v in moved.items() if t != self.proc.pid]
        return {"step": step, "decode": r["mean_stream_decode_tok_s"], "share": r["mean_stream_decode_tok_s"] * step,
                "loop cpu": loop[0], "loop switches": loop[1], "model cpu": sum(c for c, _ in others),
                "model switches": sum(s for _, s in others), "client cpu": cpu}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def summary(name: str, rounds: list[dict[int, dict[str, float]]], first: list[dict[int, dict[str, float]]],
            streams: list[int]) -> str:
    """One tree's medians over the rounds (see the module doc)."""
    one = streams[0]

    def med(key: str, n: int) -> float:
        return float(np.median([r[n][key] for r in rounds]))

    def ratio(n: int, key: str, base: list[dict[int, dict[str, float]]], m: int) -> float:
        """The median over the rounds of ``key`` at ``n`` streams over ``base``'s at ``m`` in the same round."""
        return float(np.median([r[n][key] / b[m][key] for r, b in zip(rounds, base, strict=True)]))
    parts = []
    for n in streams:
        part = (f"{n} streams: step {med('step', n) * 1e3:.2f} ms, share {med('share', n):.2f}, CPU s loop "
                f"{med('loop cpu', n):.2f} (switched {med('loop switches', n):.0f}), model {med('model cpu', n):.2f} "
                f"(switched {med('model switches', n):.0f}), client {med('client cpu', n):.2f}")
        if n != one:
            part += (f"; step x {one}-stream's {ratio(n, 'step', rounds, one):.2f}, decode summed x {one} stream's "
                     f"{n / one * ratio(n, 'decode', rounds, one):.2f}")
        if rounds is not first:
            part += f"; step x the first tree's {ratio(n, 'step', first, n):.3f}"
        parts.append(part)
    return f"{name}:\n    " + "\n    ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trees", required=True, help="source trees, comma-separated (the first is the reference)")
    p.add_argument("--model", default=None)
    p.add_argument("--streams", default="1,4,8")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--max-context", type=int, default=4096)
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--warm-wait", type=float, default=300.0, metavar="SECONDS")
    p.add_argument("--engine-steps", action="store_true",
                   help="after each round of N streams, time the engine's N-row step alone in this process")
    args = p.parse_args()
    from tg_llm.cli import model_path
    path = model_path(args.model)
    streams = [int(s) for s in args.streams.split(",")]
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    if any(not (t / "tgcore").is_dir() for t in trees):
        raise SystemExit(f"--trees: each must be a tgcore source tree (with a tgcore folder): {args.trees}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    servers = [Server(t, path, args) for t in trees]
    try:
        for s in servers:
            serve.wait_healthy(s.url, s.proc)
        for s in servers:
            warm = serve.wait_warm(s.url, args.warm_wait)
            s.connect()
            serve.concurrent(s.client, s.model, max(streams), args.prompt_tokens, 8)
            print(f"{s.tree}: idle captures {'made' if warm else 'not all made'}", flush=True)
        engine = serve.EngineSteps(path, streams, args.prompt_tokens, args.gen_tokens, args.max_context) \
            if args.engine_steps else None
        results: list[list[dict[int, dict[str, float]]]] = [[] for _ in servers]
        alone: list[dict[int, float]] = []
        for r in range(args.rounds):
            order = list(range(len(servers)))[::1 if r % 2 == 0 else -1]
            for i in order:
                results[i].append({})
            alone.append({})
            for n in streams:
                for i in order:
                    results[i][-1][n] = fig = servers[i].round(n, args)
                    print(f"  round {r + 1}, tree {i + 1}, {n} streams: step {fig['step'] * 1e3:.2f} ms, decode "
                          f"{fig['decode']:.1f} tok/s, share {fig['share']:.2f} (load {os.getloadavg()[0]:.1f})",
                          flush=True)
                if engine is not None:
                    alone[-1][n] = engine.step_seconds(n)
        print(f"medians of {args.rounds} rounds (load average {os.getloadavg()[0]:.1f}):")
        for i, s in enumerate(servers):
            print(summary(f"tree {i + 1} {s.tree}", results[i], results[0], streams))
        if engine is not None:
            one = streams[0]
            print("engine alone: " + ", ".join(
                f"{n} rows {np.median([a[n] for a in alone]) * 1e3:.2f} ms"
                + (f" (x {one} row's {np.median([a[n] / a[one] for a in alone]):.2f})" if n != one else "")
                for n in streams))
    finally:
        for s in servers:
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
