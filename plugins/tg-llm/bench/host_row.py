"""The host's work per row of a batched decode step, as the server's worker does it after each step: each row's
``TokenStream.step`` (greedy sampling, detokenization, stop checks, the event). Prints; asserts nothing.

    python plugins/tg-llm/bench/host_row.py [--model FILE.gguf] [--rows 1,4,8] [--steps 32]

For each row count N: N sequences are prefilled with the same prompt and decoded together (``Model.decode``); after
each step, per row, "first read" is the main thread's CPU time of one pass over the fresh logits row (``max``: the
pool's threads wrote it, its cache lines are elsewhere), "step" that of ``TokenStream.step`` on it afterwards (the
greedy argmax reads the row again) and "argmax" that of one more ``np.argmax`` of the row: "step - argmax" is the
Python work per row (sampler, detokenizer, stop checks, event). Main-thread CPU time (``time.thread_time``), medians
over the steps: preemption is not counted. In the server a greedy row is read once, by the sampler's argmax: its cost
per row is about "first read" + "step - argmax". Both run with the core's caches cold from the step's kernels (the
main thread runs kernels too): the first ``sample`` of a step costs several times the same call repeated, and rows
after the first of a step find the code warm (SmolLM2, load ~10: "step - argmax" ~190 us at 1 row, ~35 at 8; "first
read" ~140 us at 1 row, ~45 at 8).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the bundled SmolLM2 Q4_1)")
    p.add_argument("--rows", default="1,4,8", help="row counts, comma-separated (default 1,4,8)")
    p.add_argument("--steps", type=int, default=32, help="decode steps per row count (default 32)")
    args = p.parse_args()
    from tg_llm.cli import model_path
    from tg_llm.generate import Generator, TokenStream
    from tg_llm.model import Model
    from tg_llm.sampling import SamplingParams
    from tg_llm.tokenizer import Tokenizer
    rows = sorted({int(r) for r in args.rows.split(",")})
    path = model_path(args.model)
    tokenizer = Tokenizer.from_gguf(path)
    limit = 64 + args.steps + 8
    model = Model.from_gguf(path, max_context=limit, sequences=max(rows))
    stop_ids = Generator(model, tokenizer).stop_ids()
    prompt = tokenizer.encode("Write a long story about a cat who learns to fly an airplane over the sea.")[:64]
    greedy = SamplingParams(temperature=0)
    print(f"{path.name} on {model.device}, load average {os.getloadavg()[0]:.1f}, vocab {model.vocab_size} "
          f"({model.vocab_size * 4 / 1024:.0f} KiB of float32 logits per row)")
    print(f"{'rows':>4s} {'first read':>12s} {'step':>10s} {'argmax':>10s} {'step - argmax':>14s} "
          f"{'server per row':>15s}")
    try:
        for n in rows:
            model.reset()
            streams, tokens = [], []
            for s in range(n):
                stream = TokenStream(tokenizer, len(prompt), 0, 10 ** 6, greedy, None, None, stop_ids, limit)
                tokens.append(stream.step(model.forward_last(prompt, 0, seq=s)).token_id)
                streams.append(stream)
            first, step, again = [], [], []
            for _ in range(args.steps):
                logits = model.decode([(s, tokens[s], streams[s].pos - 1) for s in range(n)])
                read = work = argmax = 0.0
                for s in range(n):
                    t0 = time.thread_time()
                    logits[s].max()
                    t1 = time.thread_time()
                    tokens[s] = streams[s].step(logits[s]).token_id
                    t2 = time.thread_time()
                    np.argmax(logits[s])
                    read, work, argmax = read + t1 - t0, work + t2 - t1, argmax + time.thread_time() - t2
                first.append(read / n)
                step.append(work / n)
                again.append(argmax / n)
            a, b, c = (statistics.median(x) * 1e6 for x in (first, step, again))
            print(f"{n:4d} {a:10.1f}us {b:8.1f}us {c:8.1f}us {b - c:12.1f}us {a + b - c:13.1f}us")
    finally:
        model.close()


if __name__ == "__main__":
    main()
