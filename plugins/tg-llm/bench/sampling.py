"""The sampler's CPU time per row, setting by setting, on a real model's logits. Prints only.

    python plugins/tg-llm/bench/sampling.py [--model FILE.gguf] [--rows 48] [--repeats 7]
                                            [--against OTHER/tg_llm/sampling.py] [--logits FILE.npy]

The rows are the logits ``tg llm`` decodes a chat answer from (the bundled SmolLM2 Q4_1 by default; ``--logits``
reads them from a ``.npy`` file of shape (rows, vocab) instead, or writes them there when it does not exist), each
sampled with the tokens decoded before it as its history. Each setting samples every row (``Sampler.sample``, the
worker's call per row of a step) in repeats that alternate with ``--against``'s sampler (another tree's
``tg_llm/sampling.py``, e.g. main's) when given; a figure is the median over the repeats of main-thread CPU time
per row (``time.thread_time``: preemption by other processes not counted), and "x 8 rows" what a step of 8 streams
spends sampling. With ``--against`` the two samplers' tokens and log-probabilities are compared for every row and
seed: "same" or the number of rows that differ.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

DEFAULTS = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)  # llama.cpp's server (``SERVER_DEFAULTS``)
PENALTIES = dict(repetition_penalty=1.1, frequency_penalty=0.1, presence_penalty=0.1, repeat_last_n=64)
SETTINGS: dict[str, dict[str, Any]] = {
    "greedy": dict(temperature=0),
    "temperature 0.8": dict(temperature=0.8),
    "top-k 40": dict(temperature=0.8, top_k=40),
    "top-p 0.95": dict(temperature=0.8, top_p=0.95),
    "min-p 0.05": dict(temperature=0.8, min_p=0.05),
    "greedy + penalties": dict(temperature=0, **PENALTIES),
    "server defaults": DEFAULTS,
    "defaults + penalties": dict(DEFAULTS, **PENALTIES),
    "defaults + logprobs 5": dict(DEFAULTS, logprob=True, logprobs=5),
}
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def decoded_logits(path: Path, rows: int) -> tuple[np.ndarray, list[int]]:
    """The logits rows of a chat answer's first ``rows`` tokens (float32, (rows, vocab)) and the tokens drawn."""
    from tg_llm import Tokenizer
    from tg_llm.generate import Generator
    from tg_llm.model import Model
    model = Model.from_gguf(path, max_context=512)
    tokenizer = Tokenizer.from_gguf(path)
    kept: list[np.ndarray] = []
    forward_last = model.forward_last

    def keep(*args: Any, **kwargs: Any) -> Any:
        out = forward_last(*args, **kwargs)
        kept.append(np.array(out, np.float32))
        return out
    model.forward_last = keep
    prompt = tokenizer.encode_chat([{"role": "user", "content": PROMPT}])
    tokens = [e.token_id for e in Generator(model, tokenizer).generate(prompt, rows, seed=0, stop_ids=[], **DEFAULTS)]
    return np.stack(kept[:len(tokens)]), [int(t) for t in tokens if t is not None]


def load_peer(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("peer_sampling", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def run(module: ModuleType, logits: np.ndarray, tokens: list[int], setting: dict[str, Any],
        seed: int = 0) -> tuple[float, list[Any]]:
    """(CPU seconds per row, the samples) of every row sampled once with ``module``'s sampler."""
    params = module.SamplingParams(**setting)
    sampler = module.Sampler(seed)
    out = []
    t0 = time.thread_time()
    for i, row in enumerate(logits):
        out.append(sampler.sample(row, params, tokens[:i]))
    return (time.thread_time() - t0) / len(logits), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the bundled SmolLM2 Q4_1)")
    p.add_argument("--rows", type=int, default=48, help="decoded rows to sample (default 48)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per setting (default 7)")
    p.add_argument("--against", type=Path, default=None, help="another tree's tg_llm/sampling.py, timed alongside")
    p.add_argument("--logits", type=Path, default=None, help="a .npy of logits rows to read (or to write)")
    args = p.parse_args()
    from tg_llm import sampling
    if args.logits is not None and args.logits.exists():
        logits = np.load(args.logits)
        tokens = [int(np.argmax(row)) for row in logits]  # (a history for the penalties)
    else:
        from tg_llm.cli import model_path
        logits, tokens = decoded_logits(model_path(args.model), args.rows)
        if args.logits is not None:
            np.save(args.logits, logits)
    peer = load_peer(args.against) if args.against else None
    print(f"{logits.shape[0]} rows of {logits.shape[1]} logits, load average {os.getloadavg()[0]:.1f}; "
          f"CPU us per row (median of {args.repeats})")
    head = f"{'setting':24} {'this':>9} {'x 8 rows':>9}"
    print(head + (f" {'against':>9} {'x 8 rows':>9} {'ratio':>6}  same tokens/logprobs" if peer else ""))
    for name, setting in SETTINGS.items():
        mine, theirs, differ = [], [], 0
        for repeat in range(args.repeats):
            seconds, samples = run(sampling, logits, tokens, setting, seed=repeat)
            mine.append(seconds)
            if peer is not None:
                seconds, expected = run(peer, logits, tokens, setting, seed=repeat)
                theirs.append(seconds)
                differ += sum(tuple(a) != tuple(b) for a, b in zip(samples, expected, strict=True))
        a = statistics.median(mine) * 1e6
        line = f"{name:24} {a:9.1f} {8 * a / 1e3:8.2f}m"
        if peer is not None:
            b = statistics.median(theirs) * 1e6
            line += f" {b:9.1f} {8 * b / 1e3:8.2f}m {b / a:5.1f}x  {'same' if not differ else f'{differ} differ'}"
        print(line)


if __name__ == "__main__":
    main()
