"""``tg gguf info FILE [--tensors]``: what a GGUF file holds, without reading its tensor data.

Errors a user can cause (missing file, not a GGUF file) print one line to stderr and exit 1.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Columns separated by two spaces; columns listed in ``right`` are right-aligned."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _human(n: float, unit: str = "B") -> str:
    for prefix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or prefix == "T":
            return f"{n:.0f} {prefix}{unit}" if prefix == "" else f"{n:.2f} {prefix}{unit}"
        n /= 1000
    raise AssertionError("unreachable")


def summary(gf: Any) -> list[tuple[str, str]]:
    """(label, value) rows describing the model in ``gf`` (a GGUFFile)."""
    md = gf.metadata
    arch = md.get("general.architecture")
    tokens = md.get("tokenizer.ggml.tokens")
    tokenizer = str(md.get("tokenizer.ggml.model", "-"))
    if isinstance(tokens, list):
        tokenizer += f" ({len(tokens)} tokens)"
    params = sum(t.n_elements for t in gf.tensor_info.values())
    data_bytes = sum(t.nbytes for t in gf.tensor_info.values())
    return [
        ("file", f"{gf.path} ({_human(gf.file_size)}, GGUF v{gf.version}, alignment {gf.alignment})"),
        ("architecture", str(arch if arch is not None else "-")),
        ("name", str(md.get("general.name", "-"))),
        ("context length", str(md.get(f"{arch}.context_length", "-"))),
        ("tokenizer", tokenizer),
        ("parameters", f"{params:,} ({_human(params, '')})".rstrip()),
        ("tensors", f"{len(gf.tensor_info)} ({_human(data_bytes)} of data)"),
        ("metadata keys", str(len(md))),
    ]


def quant_mix(gf: Any) -> list[tuple[str, int, int, int]]:
    """(type name, tensor count, bytes, parameters) per ggml type, most bytes first."""
    mix: dict[str, list[int]] = {}
    for t in gf.tensor_info.values():
        row = mix.setdefault(t.type.name, [0, 0, 0])
        row[0] += 1
        row[1] += t.nbytes
        row[2] += t.n_elements
    return sorted(((k, *v) for k, v in mix.items()), key=lambda r: (-r[2], r[0]))  # type: ignore[misc]


def render_info(gf: Any, tensors: bool = False) -> str:
    rows = summary(gf)
    width = max(len(label) for label, _ in rows)
    out = [f"{label.ljust(width)}  {value}" for label, value in rows]
    total = sum(t.nbytes for t in gf.tensor_info.values()) or 1
    mix = [(name, count, f"{nbytes:,}", f"{100 * nbytes / total:.1f}%", f"{params:,}")
           for name, count, nbytes, params in quant_mix(gf)]
    out += ["", "quantization mix:",
            _table(("type", "tensors", "bytes", "share", "parameters"), mix, right=(1, 2, 3, 4))]
    if tensors:
        rows_t = [(t.name, t.type.name, "x".join(map(str, t.shape)) or "scalar", f"{t.nbytes:,}")
                  for t in gf.tensor_info.values()]
        out += ["", _table(("name", "type", "shape", "bytes"), rows_t, right=(3,))]
    return "\n".join(out)


def cmd_info(args: argparse.Namespace) -> int:
    from tg_gguf.reader import GGUFError, load
    try:
        with load(args.file) as gf:
            text = render_info(gf, tensors=args.tensors)
    except FileNotFoundError:
        print(f"tg gguf info: no such file: {args.file}", file=sys.stderr)
        return 1
    except (GGUFError, OSError) as e:
        print(f"tg gguf info: {_one_line(e)}", file=sys.stderr)
        return 1
    print(text)
    return 0


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    gguf = subparsers.add_parser("gguf", help="inspect GGUF model files")
    sub = gguf.add_subparsers(dest="gguf_command", metavar="COMMAND")
    info = sub.add_parser("info", help="architecture, name, context length, tokenizer, quantization mix, size")
    info.add_argument("file", help="a .gguf file")
    info.add_argument("--tensors", action="store_true", help="also list every tensor: name, type, shape, bytes")
    info.set_defaults(func=cmd_info)

    def usage(args: argparse.Namespace) -> int:
        gguf.print_help(sys.stderr)
        return 2
    gguf.set_defaults(func=usage)
