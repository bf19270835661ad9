"""Serving figures of ``tg serve llm`` (or any OpenAI-compatible server) with the openai client. Prints only.

    python plugins/tg-llm/bench/serve.py [--model FILE.gguf] [--streams 1,4,8] [--prompt-tokens 128]
                                         [--gen-tokens 64] [--long-prompt-tokens 2000] [--parallel 8]
                                         [--url http://HOST:PORT] [--llama-server PATH] [--engine-steps]
                                         [--rounds 5] [--stream-rounds 1]

Without ``--url`` it first runs ``tg llm bench``'s decode with the same lengths (the single-stream
reference), then starts ``tg serve llm --parallel 8`` on a free loopback port, waits for the captures it makes
while idle after "ready" (``--warm-wait``: the time from launch is printed; 0 measures at once), warms it up with
one round of the most streams, and measures:

- one stream against the engine alone, ``--rounds`` times in turn (the engine's decode of the same prompt and
  generation lengths in this process, loaded once, then one stream through the server; the order alternates):
  each round's pair and their CPU seconds per decoded token (this process's for the engine, the server process's
  from the stream's first token to its last for the server), then the medians. The first round is the issue's
  one-run figure (``--rounds 1`` is that alone); wall-clock figures on a shared machine vary from round to round,
  the median of several is steadier;
- one stream and N concurrent streams (completions with random token-id prompts, greedy): aggregate
  completion tokens per second of wall time (the N prompts' prefill included, as one stream's own: a round of N
  streams is N prefills and 63 or more batched steps, the engine's N-row decode figure the steps alone), each
  stream's decode rate (first token to last), the median time to first token, and from a tg server where its
  worker's time went (prefill chunks and the forwards they ran in, slot swaps, decode steps with those run while a
  prompt prefilled and the sequences and rows per step, host work, idle, waiting for the requests sent together) and
  the mean stream's decode times the worker's mean step: the share of a stream's span its own steps took, what the
  server loses around the steps whatever the machine's load;
- with ``--stream-rounds R``, those stream counts R times over (each round 1, 4, 8 in turn) and their medians, with
  the median of the rounds' ratios of N streams' summed decode to the same round's one stream;
- with ``--engine-steps``, after each round of N streams: the engine's N-row step alone at the same positions (this
  process, a model of its own), beside the worker's mean step in that round: what the server adds to a step;
- the time to first token of a short request sent while a ``--long-prompt-tokens`` prompt prefills;
- with 4 streams generating, how long SIGTERM takes to end the server, and its exit status.

With ``--llama-server PATH`` (built by ``bench/build_llama_cpp.py``; a benchmark only) it then starts
llama.cpp's server with the same ``--parallel`` (each slot ``--max-context`` positions), makes the same
requests, and prints the ratios tg / llama-server. With ``--url`` the same requests go to a server already
running and the SIGTERM step is left out. One run each: figures on a shared machine vary.
"""
from __future__ import annotations

import argparse
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prompt_ids(n: int, seed: int, vocab: int = 49152) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(100, vocab - 1, n)]


def one_stream(client: Any, model: str, prompt: list[int], gen_tokens: int,
               on_first: Any = None) -> dict[str, float]:
    """Stream one completion; times of the request, its first and last token, and the token count (``on_first()``
    called when the first token came)."""
    start = time.perf_counter()
    first = last = None
    tokens = 0
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=gen_tokens, temperature=0,
                                       stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].text:
            last = time.perf_counter()
            if first is None and on_first is not None:
                on_first()
            first = first or last
    first = first or time.perf_counter()
    last = last or first
    return {"start": start, "first": first, "last": last, "tokens": tokens}


def concurrent(client: Any, model: str, n: int, prompt_tokens: int, gen_tokens: int) -> dict[str, float]:
    results: list[dict[str, float]] = [{} for _ in range(n)]

    def run(i: int) -> None:
        results[i] = one_stream(client, model, prompt_ids(prompt_tokens, 100 + i), gen_tokens)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    decode = [(r["tokens"] - 1) / (r["last"] - r["first"]) for r in results if r["last"] > r["first"]]
    return {"aggregate_tok_s": tokens / wall, "mean_stream_decode_tok_s": float(np.mean(decode)) if decode else 0.0,
            "tokens": tokens, "wall_s": wall, "ttft_s": float(np.median([r["first"] - r["start"] for r in results]))}


def ttft_behind_long_prompt(client: Any, model: str, long_tokens: int) -> float:
    """TTFT of a 16-token request sent 0.2 s after a ``long_tokens`` prompt (the prefill running)."""
    long = threading.Thread(target=one_stream, args=(client, model, prompt_ids(long_tokens, 7), 4))
    long.start()
    time.sleep(0.2)
    r = one_stream(client, model, prompt_ids(16, 8), 4)
    long.join()
    return r["first"] - r["start"]


def sigterm_seconds(proc: subprocess.Popen, client: Any, model: str, gen_tokens: int) -> tuple[float, int]:
    """Seconds from SIGTERM to the server's exit, sent once 4 streams have each received a token."""
    generating = [threading.Event() for _ in range(4)]

    def run(i: int) -> None:
        try:
            stream = client.completions.create(model=model, prompt=prompt_ids(128, 200 + i), max_tokens=gen_tokens,
                                               temperature=0, stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].text:
                    generating[i].set()
        except Exception as e:  # noqa: BLE001 - a stream the shutdown cut is expected; report anything else
            if not generating[i].is_set():
                print(f"  stream {i} failed before its first token: {type(e).__name__}: {e}")
        finally:
            generating[i].set()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for g in generating:
        g.wait(600)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(120)
    seconds = time.perf_counter() - t0
    for t in threads:
        t.join(30)
    return seconds, code


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 300) -> None:
    import httpx
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server at {url} did not become ready (exit status {proc.poll()})")


def server_metric(url: str, name: str) -> float | None:
    """One value of the server's /metrics (None: a server without it)."""
    import httpx
    try:
        text = httpx.get(url + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return float(value)
    return None


def wait_warm(url: str, seconds: float) -> bool:
    """Wait (at most ``seconds``) until the server has made the captures it makes while idle after ready."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = server_metric(url, "tg_llm_warm_ups_left")
        if left is None or left == 0:
            return left == 0
        time.sleep(0.5)
    return False


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class EngineDecode:
    """``tg llm bench``'s decode in this process, for rounds in turn with the server's: the model loaded once (one
    sequence, as the bench runs), the prefill and every decode window the rounds reach captured before the first."""

    def __init__(self, path: Any, prompt_tokens: int, gen_tokens: int, max_context: int) -> None:
        from tg_llm.cli import load_model, reached_shapes
        self.model = load_model(path, None, max_context, True, 1, None)
        self.prompt = prompt_ids(prompt_tokens, 0, self.model.vocab_size)
        self.gen_tokens = gen_tokens
        self.model.warm_up(reached_shapes(self.model, 1, range(prompt_tokens, prompt_tokens + gen_tokens)))
        for _ in range(2):  # the prefill's capture and a replay; the decode steps' replays
            self.rate()

    def rate(self) -> tuple[float, float]:
        """Decode tokens per second of ``gen_tokens`` greedy steps after the prompt, and CPU seconds per token."""
        model, n = self.model, len(self.prompt)
        model.reset()
        token = int(np.argmax(model.forward_last(self.prompt, 0)))
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(self.gen_tokens):
            token = int(np.argmax(model.decode([(0, token, n + i)])[0]))
        return self.gen_tokens / (time.perf_counter() - t0), (time.process_time() - c0) / self.gen_tokens


class EngineSteps:
    """The engine's batched decode step alone at the server's rows and positions (``--engine-steps``): N prompts of
    ``prompt_tokens`` prefilled, then ``gen_tokens`` - 1 steps of N rows, as a round of N streams runs them; the
    attention window grows with the positions (128-token prompts decode at 128..191, a 192-slot window: a 4- or
    8-row step there costs ~20% more one-thread CPU than at the few positions of ``bench/batch_step.py``'s default)."""

    def __init__(self, path: Any, rows: list[int], prompt_tokens: int, gen_tokens: int, max_context: int) -> None:
        from tg_llm.cli import load_model, reached_shapes
        # (the server's context: the same cache layout; its pages are mapped only where the steps write)
        self.model = load_model(path, None, max_context, True, max(rows), None)
        self.prompt_tokens, self.gen_tokens = prompt_tokens, gen_tokens
        positions = range(prompt_tokens, prompt_tokens + gen_tokens)
        self.model.warm_up([s for n in rows for s in reached_shapes(self.model, n, positions)])
        for n in rows:  # (the prefill's captures and a replay of every step)
            self.step_seconds(n)

    def step_seconds(self, rows: int) -> float:
        """Mean seconds of one ``rows``-row greedy step over the round's positions (the worker's figure beside it is
        a mean, its decode seconds over its steps: like with like; a median leaves out the steps load slowed)."""
        model, n = self.model, self.prompt_tokens
        model.reset()
        tokens = [int(np.argmax(model.forward_last(prompt_ids(n, 100 + i, model.vocab_size), 0, seq=i)))
                  for i in range(rows)]
        times = []
        for pos in range(n, n + self.gen_tokens - 1):
            t0 = time.perf_counter()
            logits = model.decode([(i, tokens[i], pos) for i in range(rows)])
            times.append(time.perf_counter() - t0)
            tokens = [int(np.argmax(row)) for row in logits]
        return float(np.mean(times))


def one_stream_rounds(url: str, pid: int | None, engine: EngineDecode, args: argparse.Namespace) -> dict[str, float]:
    """``args.rounds`` rounds of the engine's decode and one stream through the server, in alternating order; prints
    each and the medians."""
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    rows = []
    compiled = kernels_compiled(url)
    for r in range(args.rounds):
        pair: dict[str, float] = {}
        for side in (("engine", "server") if r % 2 == 0 else ("server", "engine")):
            if side == "engine":
                pair["engine"], pair["engine cpu"] = engine.rate()
                continue
            at_first: list[float] = []  # (the server's CPU seconds when the first token came: its decode's from there)
            s = one_stream(client, model, prompt_ids(args.prompt_tokens, 100), args.gen_tokens,
                           functools.partial(lambda p, seen: seen.append(cpu_seconds(p)), pid, at_first)
                           if pid is not None else None)
            pair["server"] = (s["tokens"] - 1) / (s["last"] - s["first"])
            pair["server cpu"] = (cpu_seconds(pid) - at_first[0]) / max(1, s["tokens"] - 1) if at_first and pid \
                else float("nan")
        rows.append(pair)
        print(f"  round {r + 1}: engine {pair['engine']:.1f} tok/s, server one stream {pair['server']:.1f} tok/s: "
              f"{pair['server'] / pair['engine']:.2f}x; CPU per token engine {pair['engine cpu'] * 1e3:.2f} ms, "
              f"server {pair['server cpu'] * 1e3:.2f} ms" + (" (the issue's one run)" if r == 0 else ""), flush=True)
    med = {k: float(np.median([p[k] for p in rows])) for k in rows[0]}
    ratios = [p["server"] / p["engine"] for p in rows]
    print(f"  median of {args.rounds} rounds: engine {med['engine']:.1f} tok/s, server {med['server']:.1f} tok/s: "
          f"{med['server'] / med['engine']:.2f}x (median of the rounds' ratios {np.median(ratios):.2f}x, range "
          f"{min(ratios):.2f}-{max(ratios):.2f}); CPU per token engine {med['engine cpu'] * 1e3:.2f} ms, server "
          f"{med['server cpu'] * 1e3:.2f} ms{compiled_note(url, compiled)}", flush=True)
    return med


def kernels_compiled(url: str) -> tuple[int, int] | None:
    """The server's ``tg_llm_kernels_compiled`` and ``tg_llm_kernels_generated`` (those not in the program cache)
    from /metrics (None: a server without them, e.g. llama-server)."""
    import httpx
    try:
        text = httpx.get(url + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return None
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("tg_llm_kernels_compiled", "tg_llm_kernels_generated"):
            values[name] = int(float(value))
    if len(values) < 2:
        return None
    return values["tg_llm_kernels_compiled"], values["tg_llm_kernels_generated"]


def worker_figures(url: str) -> dict[str, float]:
    """The tg server's worker clock from /metrics: seconds per phase, decode steps, their sequences and rows, prefill
    chunks (empty for a server without them)."""
    import httpx
    try:
        text = httpx.get(url + "/metrics", timeout=30).text
    except httpx.HTTPError:
        return {}
    out = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith("tg_llm_worker_seconds_total{phase="):
            out[name.split('"')[1]] = float(value)
        elif name in ("tg_llm_decode_steps_total", "tg_llm_decode_rows_total", "tg_llm_decode_step_rows_total",
                      "tg_llm_prefill_chunks_total", "tg_llm_prefill_forwards_total", "tg_llm_slot_swaps_total",
                      "tg_llm_decode_steps_while_prefilling_total"):
            out[name[len("tg_llm_"):-len("_total")]] = float(value)
    return out


def worker_note(url: str, before: dict[str, float], stream_decode: float = 0.0) -> str:
    """Where the worker's time went since ``before`` (``worker_figures``): what a round loses against the engine's
    steps alone (prefill, host work, steps with fewer rows than streams). With ``stream_decode`` (the round's mean
    decode tok/s per stream): that rate times the worker's mean step, the share of a stream's first-to-last span that
    its own steps took (1.0: nothing else ran between them; both measured in the round, so the machine's load
    cancels out mostly)."""
    after = worker_figures(url)
    if not before or not after:
        return ""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    steps = max(d.get("decode_steps", 0.0), 1.0)
    # (a server without the later counters: their figures left out)
    forwards = f" in {d['prefill_forwards']:.0f} forwards" if "prefill_forwards" in d else ""
    swaps = f", {d['slot_swaps']:.0f} slot swaps" if "slot_swaps" in d else ""
    between = f", {d['decode_steps_while_prefilling']:.0f} of them while a prompt prefilled" \
        if "decode_steps_while_prefilling" in d else ""
    return (f"; worker: prefill {d.get('prefill', 0):.2f} s ({d.get('prefill_chunks', 0):.0f} chunks{forwards}"
            f"{swaps}), decode {d.get('decode', 0):.2f} s ({d.get('decode_steps', 0):.0f} steps{between}, "
            f"{d.get('decode_rows', 0) / steps:.1f} sequences and {d.get('decode_step_rows', 0) / steps:.1f} rows per "
            f"step), host {d.get('host', 0):.2f} s, idle {d.get('idle', 0):.2f} s"
            + (f", gathering arrivals {d['gather'] * 1e3:.0f} ms" if "gather" in d else "")
            + (f"; a stream's decode x the mean step: {stream_decode * d['decode'] / steps:.2f}"
               if stream_decode and d.get("decode") else ""))


def engine_note(url: str, before: dict[str, float], engine: EngineSteps | None, rows: int) -> str:
    """The engine's ``rows``-row step alone, measured now, beside the worker's mean step in the round just run."""
    after = worker_figures(url)
    if engine is None or not before or not after:
        return ""
    steps = after.get("decode_steps", 0.0) - before.get("decode_steps", 0.0)
    worker = (after.get("decode", 0.0) - before.get("decode", 0.0)) / max(steps, 1.0)
    alone = engine.step_seconds(rows)
    return (f"    engine alone, {rows} row(s) at the same positions: {alone * 1e3:.2f} ms per step (mean); the "
            f"worker's steps in this round {worker * 1e3:.2f} ms (mean): {worker / alone:.2f}x")


def compiled_note(url: str, before: tuple[int, int] | None) -> str:
    after = kernels_compiled(url)
    if before is None or after is None:
        return ""
    return f", {after[0] - before[0]} kernels compiled ({after[1] - before[1]} generated, the rest from the cache)"


def measure(url: str, args: argparse.Namespace, streams: list[int],
            engine: EngineSteps | None = None) -> dict[str, float]:
    """The figures of one server: aggregate tok/s per stream count and the TTFT behind a long prefill (and, from a
    tg server, the kernels each step compiled; with ``engine``, its step alone after each round)."""
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    # warm-up (compiles, captures each batch size's step): the most streams, short generations
    compiled = kernels_compiled(url)
    r = concurrent(client, model, max(streams), args.prompt_tokens, 8)
    print(f"  warm-up round ({max(streams)} streams, 8 tokens): {r['wall_s']:.1f} s{compiled_note(url, compiled)}")
    rounds: list[dict[str, float]] = []
    for i in range(args.stream_rounds):
        figures: dict[str, float] = {}
        label = f"round {i + 1}, " if args.stream_rounds > 1 else ""
        for n in streams:
            compiled, worker = kernels_compiled(url), worker_figures(url)
            r = concurrent(client, model, n, args.prompt_tokens, args.gen_tokens)
            figures[f"{n} streams"] = r["aggregate_tok_s"]
            figures[f"{n} streams decode"] = r["mean_stream_decode_tok_s"]
            print(f"  {label}{n} stream(s): aggregate {r['aggregate_tok_s']:.1f} tok/s, per stream decode "
                  f"{r['mean_stream_decode_tok_s']:.1f} tok/s (summed: {n * r['mean_stream_decode_tok_s']:.1f}; "
                  f"{r['tokens']} tokens in {r['wall_s']:.1f} s, TTFT {r['ttft_s']:.3f} s (median)"
                  f"{compiled_note(url, compiled)}"
                  f"{worker_note(url, worker, r['mean_stream_decode_tok_s'])})", flush=True)
            if note := engine_note(url, worker, engine, n):
                print(note, flush=True)
        rounds.append(figures)
    out = {k: float(np.median([f[k] for f in rounds])) for k in rounds[0]}
    if len(rounds) > 1:
        print(f"  medians of {len(rounds)} rounds: " + ", ".join(
            f"{n} stream(s) aggregate {out[f'{n} streams']:.1f} tok/s, per stream decode "
            f"{out[f'{n} streams decode']:.1f}" for n in streams) + round_ratios(rounds, streams), flush=True)
    compiled = kernels_compiled(url)
    out["ttft"] = ttft_behind_long_prompt(client, model, args.long_prompt_tokens)
    print(f"  TTFT of a short request behind a {args.long_prompt_tokens}-token prefill: {out['ttft']:.2f} s"
          f"{compiled_note(url, compiled)}", flush=True)
    return out


def round_ratios(rounds: list[dict[str, float]], streams: list[int]) -> str:
    """Each round's decode summed over N streams against the same round's one stream: their median and range (a
    round's counts run one after another, so a ratio within a round sees one machine load)."""
    if 1 not in streams:
        return ""
    parts = []
    for n in (n for n in streams if n != 1):
        ratios = [n * f[f"{n} streams decode"] / f["1 streams decode"] for f in rounds if f["1 streams decode"]]
        if ratios:
            parts.append(f"{n} streams {np.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})")
    return "; decode summed over the streams vs one, median of the rounds' ratios: " + ", ".join(parts) if parts \
        else ""


def versus_one_stream(tg: dict[str, float], streams: list[int], bench_decode: float) -> str:
    """The summary line of a run with one stream among ``streams``: its decode against ``tg llm bench``'s, then (with
    more streams) each count's aggregate and summed decode against one stream's."""
    one = tg["1 streams"]
    parts = [f"one stream's decode vs tg llm bench decode: {tg['1 streams decode'] / bench_decode:.2f}x "
             f"(its aggregate, prefill included: {one / bench_decode:.2f}x)"]
    more = [n for n in streams if n != 1]
    if more:  # (one stream alone: nothing to compare with)
        parts.append(", ".join(f"{n} streams {tg[f'{n} streams'] / one:.2f}x one" for n in more))
        parts.append("decode summed over the streams (prefills left out): " + ", ".join(
            f"{n} streams {n * tg[f'{n} streams decode'] / tg['1 streams decode']:.2f}x one" for n in more))
    return "; ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None)
    p.add_argument("--url", default=None, help="an OpenAI-compatible server already running (no SIGTERM step)")
    p.add_argument("--llama-server", default=None, metavar="PATH",
                   help="also start this llama-server binary with the same --parallel and print both side by side")
    p.add_argument("--streams", default="1,4,8")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--long-prompt-tokens", type=int, default=2000)
    p.add_argument("--max-context", type=int, default=4096)
    p.add_argument("--parallel", type=int, default=8, help="tg serve llm --parallel (slots decoded together)")
    p.add_argument("--rounds", type=int, default=5, help="one-stream rounds in turn with the engine (median)")
    p.add_argument("--stream-rounds", type=int, default=1,
                   help="rounds of the 1/4/8-stream figures, each count in turn (medians; 1: the issue's one run)")
    p.add_argument("--warm-wait", type=float, default=300.0, metavar="SECONDS",
                   help="wait at most this long after ready for the server's idle captures (0: measure at once)")
    p.add_argument("--engine-steps", action="store_true",
                   help="after each round of N streams, time the engine's N-row step alone at the same positions")
    args = p.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.url is not None:
        measure(args.url.rstrip("/"), args, streams)
        return 0
    from tg_llm.cli import model_path, run_bench
    path = model_path(args.model)
    r = run_bench(path, None, args.prompt_tokens, args.gen_tokens, args.max_context)
    bench_decode = r["decode_tok_s"]
    print(f"tg llm bench decode: {bench_decode:.1f} tok/s ({args.prompt_tokens}-token prompt, "
          f"{args.gen_tokens} tokens; {r['compiles_timed']} kernels compiled while timed)")
    engine = EngineDecode(path, args.prompt_tokens, args.gen_tokens, args.max_context) if args.rounds else None
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tgcore.cli", "serve", "llm", "--model", str(path), "--port",
                             str(port), "--max-context", str(args.max_context), "--parallel", str(args.parallel),
                             "--log-level", "warning"], stdin=subprocess.DEVNULL)
    launched = time.perf_counter()
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    ready = time.perf_counter() - launched
    at_ready = kernels_compiled(url)
    print(f"tg serve llm --parallel {args.parallel}: ready {ready:.1f} s after launch"
          + (f" ({at_ready[0]} kernels compiled, {at_ready[1]} generated)" if at_ready else ""), flush=True)
    if args.warm_wait > 0:
        warm = wait_warm(url, args.warm_wait)
        after = kernels_compiled(url)
        print(f"  idle captures {'made' if warm else 'not all made'} {time.perf_counter() - launched:.1f} s after "
              f"launch" + (f" ({after[0]} kernels compiled in all)" if after else ""), flush=True)
    if engine is not None:
        one_stream_rounds(url, proc.pid, engine, args)
    steps = EngineSteps(path, streams, args.prompt_tokens, args.gen_tokens, args.max_context) \
        if args.engine_steps else None
    tg = measure(url, args, streams, steps)
    if 1 in streams:
        print("  " + versus_one_stream(tg, streams, bench_decode))
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    seconds, code = sigterm_seconds(proc, client, client.models.list().data[0].id, 256)
    print(f"  SIGTERM with 4 streams running: exit {code} after {seconds:.1f} s")
    if args.llama_server:
        port = free_port()
        # llama-server splits its context between the slots: each gets max_context
        llama = subprocess.Popen([args.llama_server, "-m", str(path), "--port", str(port), "--host", "127.0.0.1",
                                  "--parallel", str(args.parallel), "-c", str(args.max_context * args.parallel),
                                  "--log-disable"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, llama)
            print(f"llama-server --parallel {args.parallel}:")
            ref = measure(url, args, streams)
        finally:
            llama.terminate()
            llama.wait(30)
        print(f"tg / llama-server (load average {os.getloadavg()[0]:.1f}): " + ", ".join(
            [f"{n} streams {tg[f'{n} streams'] / ref[f'{n} streams']:.2f}x" for n in streams]
            + [f"TTFT {tg['ttft']:.2f} s vs {ref['ttft']:.2f} s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
