"""Decode speed of each architecture on synthetic files of one size, side by side with llama. Prints only.

    python plugins/tg-llm/bench/architectures.py [--archs llama,gemma3] [--runs 2] [--prompt-tokens 32]
                                                 [--gen-tokens 24] [--device CPU:X86]

The files are written with the tests' ``tiny_gguf`` at SmolLM2-135M's shape (dim 576, 30 layers, 9/3 heads
of 64, ffn 1536; Q4_0 for every matrix of every file, ``--attn-v`` another type for attn_v) and a 300-token
vocabulary,
so the figures compare the layers' work, not the output projection. Gemma 3 slides 25 of its 30 layers over
a 512-position window (its ring buffer is 768 slots). The runs alternate between architectures (a shared
machine's load then affects each alike); each row shows the range over the runs and the kernels compiled
while timed (0: every step replayed the jitted decode).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def spec_for(arch: str, attn_v: str | None = None):  # noqa: ANN201 - a TinySpec (imported late)
    from tiny_gguf import TinySpec
    shape = {"n_layers": 30, "dim": 576, "n_heads": 9, "n_kv_heads": 3, "head_dim": 64, "ffn_dim": 1536,
             "context": 4096, "quant": "Q4_0", "quant_overrides": (("attn_v.weight", attn_v),) if attn_v else ()}
    extra = {"gemma3": {"sliding_window": 512, "rope_base": 1e6, "eps": 1e-6},
             "gemma2": {"sliding_window": 512, "softcaps": (50.0, 30.0), "eps": 1e-6},
             "qwen3": {"qk_norm": True}, "qwen2": {"qkv_bias": True}}.get(arch, {})
    return TinySpec(arch, **shape, **extra)  # type: ignore[arg-type]


def main() -> int:
    from tg_llm.cli import run_bench
    from tiny_gguf import write_tiny_gguf
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archs", default="llama,gemma3")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--gen-tokens", type=int, default=24)
    ap.add_argument("--device", default=None)
    ap.add_argument("--attn-v", default=None, help="another type for attn_v (as Q4_K_M files keep it), e.g. Q8_0")
    args = ap.parse_args()
    archs = [a for a in args.archs.split(",") if a]
    results: dict[str, list[dict]] = {a: [] for a in archs}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for arch in archs:
            paths[arch] = Path(tmp) / f"{arch}.gguf"
            write_tiny_gguf(spec_for(arch, args.attn_v), paths[arch])
        for _ in range(args.runs):
            for arch in archs:
                results[arch].append(run_bench(paths[arch], args.device, args.prompt_tokens, args.gen_tokens))
    base = results[archs[0]]
    base_mid = sorted(r["decode_tok_s"] for r in base)[len(base) // 2]
    print(f"synthetic files at SmolLM2-135M's shape, prompt {args.prompt_tokens}, decode {args.gen_tokens} tokens, "
          f"{args.runs} alternating runs on {base[0]['device']}")
    print(f"{'architecture':14s} {'decode tok/s':>16s} {'prefill tok/s':>16s} {'vs ' + archs[0]:>10s}  compiles timed")
    for arch in archs:
        rs = results[arch]
        dec = sorted(r["decode_tok_s"] for r in rs)
        pre = sorted(r["prefill_tok_s"] for r in rs)
        ratio = dec[len(dec) // 2] / base_mid
        print(f"{arch:14s} {dec[0]:7.1f}..{dec[-1]:<7.1f} {pre[0]:7.1f}..{pre[-1]:<7.1f} {ratio:9.2f}x  "
              f"{[r['compiles_timed'] for r in rs]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
