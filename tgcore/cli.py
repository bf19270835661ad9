"""The ``tg`` command: ``tg plugins``, ``tg devices``, ``tg cache``, ``tg serve APP``, ``tg profile``/``tg viz``
(``tgcore.viz``), and plugin subcommands.

Kept light: it imports the plugin host (pluggy) and nothing numeric or server-side until a
command needs it.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import tgcore
from tgcore.plugins.known import install_hint
from tgcore.plugins.manager import PluginError, PluginHost, get_host
from tgcore.plugins.registry import unavailable_reason


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def cmd_plugins(args: argparse.Namespace, host: PluginHost) -> int:
    rows = [(p.name, p.distribution, p.version, ", ".join(h.removeprefix("tg_") for h in p.hooks) or "-",
             p.status + (" (builtin)" if p.builtin else ""))
            for p in host.plugins.values()]
    print(format_table(("plugin", "distribution", "version", "hooks", "status"), rows))
    if host.core_problem:
        print(f"\ntg: {host.core_problem}", file=sys.stderr)
    return 0


def cmd_devices(args: argparse.Namespace, host: PluginHost) -> int:
    from tgcore.runtime.registry import default_renderer
    rows = []
    for name, dev in host.registry.devices.items():
        renderers = host.registry.renderers.get(name, {})
        default, skipped = default_renderer(name, host)
        shown = []
        for r in renderers.values():
            reason = unavailable_reason(r.probe)
            mark = "*" if default is not None and r is default else ""
            shown.append(f"{r.name}{mark}" + (f" (unavailable: {reason})" if reason else ""))
        if isinstance(dev.variants, dict):
            shown += [f"{v} (variant)" for v in dev.variants]
        providers = sorted({dev.plugin} | {r.plugin for r in renderers.values()})
        reason = unavailable_reason(dev.probe)
        status = "available" if reason is None else f"unavailable: {reason}"
        if reason is None and renderers and default is None:
            status = "unavailable: no usable renderer (" + "; ".join(skipped) + ")"
        elif reason is None and default is not None and default.plugin != dev.plugin:
            status += f" (default renderer {default.name}: " + "; ".join(skipped) + ")"
        rows.append((name, ", ".join(shown) or "-", ", ".join(providers), status))
    print(format_table(("device", "renderers (* = default)", "provided by", "status"), rows))
    return 0


def cmd_serve(args: argparse.Namespace, host: PluginHost) -> int:
    apps = host.registry.apps
    if args.app is None or args.app not in apps:
        lines = [f"tg serve: unknown app {args.app!r}" if args.app else "tg serve: name an app to serve"]
        lines.append("available apps: " + (", ".join(sorted(apps)) or "none installed"))
        hint = install_hint("app", args.app) if args.app else ""
        if hint:
            lines.append(hint)
        for known in ("llm",):
            if known not in apps and known != args.app:
                lines.append(f"  {install_hint('app', known)}")
        print("\n".join(lines), file=sys.stderr)
        return 2
    return int(apps[args.app].run(list(args.args)) or 0)


# What tgcore and its plugins keep in the cache directory; ``tg cache clear`` removes only these names.
CACHE_PARTS = {
    "compile": "compiled kernels (machine code), by source digest",
    "beam": "BEAM search winners, one JSON file per kernel",
    "programs": "generated programs (code generation's output), one JSON file per kernel",
    "isa": "the vector ISA verdict of this machine",
    "so": "shared objects, when the temp dir is mounted noexec",
    "profiles": "PROFILE=1 / tg profile recordings (tg viz reads them)",
    "viz": "VIZ=1 rewrite traces (tg viz serve)",
    "peak.json": "this machine's measured peak speeds (tg viz)",
    "llama.cpp": "tg-llm's bench: llama.cpp tools built for comparison",
    "llm": "tg-llm: --model paths used before (tg llm models)",
}


def _size(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``."""
    if path.is_file():
        return 1, path.stat().st_size
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def cmd_cache(args: argparse.Namespace, host: PluginHost) -> int:
    """``tg cache info``: what the cache directory holds; ``tg cache clear``: remove it (nothing else)."""
    import shutil

    from tgcore.helpers import cache_dir
    folder = cache_dir()
    entries = sorted(folder.iterdir()) if folder.is_dir() else []
    if args.action == "info":
        print(f"cache directory: {folder} (TG_CACHE_DIR, default ~/.cache/tgcore; "
              f"~/Library/Caches/tgcore on macOS)")
        rows = []
        for entry in entries:
            files, size = _size(entry)
            rows.append((entry.name, str(files), f"{size / 1e6:.1f} MB", CACHE_PARTS.get(entry.name, "not tgcore's")))
        print(format_table(("entry", "files", "size", "holds"), rows) if rows else "(empty)")
        return 0
    foreign = [e.name for e in entries if e.name not in CACHE_PARTS]
    if foreign:
        print(f"tg cache clear: {folder} also holds {', '.join(foreign)}, which tgcore did not write; "
              "not clearing (is TG_CACHE_DIR right?)", file=sys.stderr)
        return 1
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    print(f"cleared {folder} ({', '.join(e.name for e in entries) or 'it was empty'})")
    return 0


def cmd_demo(args: argparse.Namespace, host: PluginHost) -> int:
    """A small tensor program on each requested device, checked against numpy."""
    import time

    import numpy as np

    from tgcore.runtime.registry import DeviceError
    from tgcore.tensor import Tensor
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 512), dtype=np.float32), rng.standard_normal((512, 128), dtype=np.float32)
    x = a @ b
    ref = np.exp(x - x.max(1, keepdims=True))
    ref = ref / ref.sum(1, keepdims=True)
    status = 0
    for device in args.devices or ["CPU"]:
        try:
            start = time.perf_counter()
            ta, tb = Tensor(a, device=device), Tensor(b, device=device)
            y = ta @ tb
            e = (y - y.max(1, keepdim=True)).exp()
            out = (e / e.sum(1, keepdim=True)).numpy()
            elapsed = time.perf_counter() - start
        except (DeviceError, RuntimeError) as err:
            print(f"{device:10s} failed: {err}")
            status = 1
            continue
        error = float(np.abs(out - ref).max())
        ok = error < 1e-4
        status |= 0 if ok else 1
        print(f"{device:10s} softmax(a @ b), a 256x512, b 512x128: max error vs numpy {error:.1e} "
              f"({'ok' if ok else 'WRONG'}), {elapsed * 1e3:.1f} ms incl. compiling")
    return status


def build_parser(host: PluginHost) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tg", description="tgcore: a tensor compiler with plugins.")
    parser.add_argument("--version", action="version", version=f"tgcore {tgcore.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("plugins", help="list plugins and whether they loaded").set_defaults(func=cmd_plugins)
    sub.add_parser("devices", help="list devices, their renderers and availability").set_defaults(func=cmd_devices)
    demo = sub.add_parser("demo", help="run a small tensor program and check it against numpy")
    demo.add_argument("devices", nargs="*", help="devices to run on (default CPU), e.g. CPU PYTHON")
    demo.set_defaults(func=cmd_demo)
    cache = sub.add_parser("cache", help="show (info) or remove (clear) compiled kernels and other cached results")
    cache.add_argument("action", choices=("info", "clear"))
    cache.set_defaults(func=cmd_cache)
    serve = sub.add_parser("serve", help="run an app a plugin provides (e.g. tg serve llm)")
    serve.add_argument("app", nargs="?", help="app name; tg serve with no name lists them")
    serve.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the app")
    serve.set_defaults(func=cmd_serve)
    from tgcore.viz import add_commands as add_profile_commands
    add_profile_commands(sub)
    host.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        host = get_host()
        parser = build_parser(host)
    except PluginError as e:  # strict mode (TG_STRICT_PLUGINS=1) and a plugin failed
        print(f"tg: {e}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    try:
        if args.func in (cmd_plugins, cmd_devices, cmd_serve, cmd_demo, cmd_cache):
            return args.func(args, host)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
