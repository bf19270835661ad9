"""The ``tg`` command: ``tg plugins``, ``tg devices``, ``tg serve APP``, and plugin subcommands.

Kept light: it imports the plugin host (pluggy) and nothing numeric or server-side until a
command needs it.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import tgcore
from tgcore.plugins.known import install_hint, provider_of
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
            shown.append(f"{r.name}{mark}" + (" (unavailable)" if reason else ""))
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
                lines.append(f"  {known}: pip install {provider_of('app', known)}")
        print("\n".join(lines), file=sys.stderr)
        return 2
    return int(apps[args.app].run(list(args.args)) or 0)


def build_parser(host: PluginHost) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tg", description="tgcore: a tensor compiler with plugins.")
    parser.add_argument("--version", action="version", version=f"tgcore {tgcore.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("plugins", help="list plugins and whether they loaded").set_defaults(func=cmd_plugins)
    sub.add_parser("devices", help="list devices, their renderers and availability").set_defaults(func=cmd_devices)
    serve = sub.add_parser("serve", help="run an app a plugin provides (e.g. tg serve llm)")
    serve.add_argument("app", nargs="?", help="app name; tg serve with no name lists them")
    serve.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the app")
    serve.set_defaults(func=cmd_serve)
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
        if args.func in (cmd_plugins, cmd_devices, cmd_serve):
            return args.func(args, host)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
