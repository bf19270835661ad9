"""``tg profile`` and ``tg viz``: record a run, then read it as tables, counters, a diff or a Chrome trace.

In:  profile files written by ``engine.profile`` (see its docstring for the format).
Out: text on stdout: ``tg viz list`` (what a profile holds, or the profiles there are), ``tg viz profile`` (a row per
     kernel: count, total and mean time, share, GFLOPS, GB/s and the share of this machine's peak), ``tg viz pmc``
     (counters per kernel as GitHub markdown), ``tg viz diff A B`` (kernel by kernel), ``tg viz export --format
     chrome`` (Chrome/Perfetto trace JSON: one track per device and kind of event), ``tg viz serve`` (a local page
     over a rewrite trace from ``VIZ=1``: ``tgcore.vizserver``).

A profile argument left out means the newest under ``<cache_dir()>/profiles``. Unknown kernel or counter names fail
with the closest known ones. The machine's peak (a memory-stream and an FMA probe with numpy) is measured once per
CPU and thread count and cached in ``<cache_dir()>/peak.json``.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tgcore.engine.profile import FORMAT, VERSION
from tgcore.helpers import cache_dir, cpu_count, write_atomically


class VizError(Exception):
    """A problem the user can fix (no profile, an unknown name, a bad file): printed as one line."""


# ---- reading profiles ----

def profiles_dir() -> pathlib.Path:
    return cache_dir() / "profiles"


def find_profile(path: str | None) -> pathlib.Path:
    if path is not None:
        return pathlib.Path(path)
    found = sorted(profiles_dir().glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise VizError(f"no profiles under {profiles_dir()}: record one with PROFILE=1 or `tg profile -- CMD`")
    return found[-1]


def load_document(path: str | os.PathLike[str], fmt: str, version: int, what: str, error: type[Exception] = VizError,
                  hint: str = "") -> dict[str, Any]:
    """A JSON file of format ``fmt`` and ``version`` (a profile, a rewrite trace); ``error`` with a one-line
    reason for a missing, unreadable or foreign file."""
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: not a readable {what} ({e})") from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise error(f"{path}: not a tgcore {what}" + (f" ({hint})" if hint else f" (no \"format\": \"{fmt}\")"))
    if data.get("version") != version:
        raise error(f"{path}: {what} version {data.get('version')}, this tgcore reads version {version}")
    return data


def load_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    return load_document(path, FORMAT, VERSION, "profile")


@dataclass
class KernelRow:
    """One kernel's runs in a profile, added up (JIT replays of it included)."""
    name: str
    device: str
    kind: str
    count: int = 0
    total_ns: int = 0
    ops: int = 0
    mem: int = 0
    jit: bool = False
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.device}/{self.name}"

    def add_counters(self, counters: dict[str, int] | None) -> None:
        for name, value in (counters or {}).items():
            self.counters[name] = self.counters.get(name, 0) + value


def kernel_rows(profile: dict[str, Any]) -> list[KernelRow]:
    """A row per (device, kernel), most total time first."""
    rows: dict[tuple[str, str], KernelRow] = {}
    for e in profile["events"]:
        if e["kind"] not in ("kernel", "copy"):
            continue
        row = rows.setdefault((e["device"], e["name"]), KernelRow(e["name"], e["device"], e["kind"]))
        row.count += 1
        row.total_ns += e["dur_ns"]
        row.ops += e["ops"]
        row.mem += e["mem"]
        row.add_counters(e.get("counters"))
    for k in profile.get("jit_kernels", []):
        row = rows.setdefault((k["device"], k["name"]), KernelRow(k["name"], k["device"], k["kind"]))
        row.count += k["count"]
        row.total_ns += k["total_ns"]
        row.ops += k["ops"]
        row.mem += k["mem"]
        row.jit = True
        row.add_counters(k.get("counters"))
    return sorted(rows.values(), key=lambda r: -r.total_ns)


def pick(name: str, known: Sequence[str], what: str) -> str:
    """``name`` if known, else a VizError with the closest matches."""
    if name in known:
        return name
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else f"; known: {', '.join(known[:10])}"
    raise VizError(f"unknown {what} {name!r}{hint}")


# ---- the machine's peak ----

def machine_peak(refresh: bool = False) -> dict[str, float]:
    """``{"gbps": streaming bytes/s / 1e9, "gflops": float32 matmul FLOP/s / 1e9}`` of this CPU at this thread count,
    measured once (about a second) and cached."""
    from tgcore.runtime.cpufeatures import cpu_features
    key = f"{cpu_features().identity}|threads={cpu_count()}"
    path = cache_dir() / "peak.json"
    try:
        cached = json.loads(path.read_text())
        if not refresh and cached.get("key") == key:
            return {"gbps": float(cached["gbps"]), "gflops": float(cached["gflops"])}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    src, dst = np.ones(1 << 25, np.float32), np.empty(1 << 25, np.float32)  # 128 MB each: far beyond the caches
    a = np.ones((1024, 1024), np.float32)
    threads = cpu_count()
    parts = [slice(i * len(src) // threads, (i + 1) * len(src) // threads) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:  # one copy per core (numpy releases the GIL while copying)
        copy_s = _best(lambda: list(pool.map(lambda p: np.copyto(dst[p], src[p]), parts)), 5)
    matmul_s = _best(lambda: a @ a, 5)  # BLAS uses every core
    peak = {"gbps": 2 * src.nbytes / copy_s / 1e9, "gflops": 2 * 1024 ** 3 / matmul_s / 1e9}
    try:
        write_atomically(path, json.dumps({"key": key, **peak}).encode())
    except OSError:
        pass
    return peak


def _best(fn: Any, runs: int) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


# ---- printers ----

def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.2f}"


def markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table, numbers right-aligned."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if num else c.ljust(w)
                                 for c, w, num in zip(row, widths, numeric, strict=True)) + " |"
    rule = "|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2))
                          for w, num in zip(widths, numeric, strict=True)) + "|"
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("%x"))
        return True
    except ValueError:
        return text == "-"


def profile_table(profile: dict[str, Any], peak: dict[str, float] | None, top: int | None = None) -> str:
    rows = kernel_rows(profile)
    total = sum(r.total_ns for r in rows) or 1
    out = []
    for r in rows[:top]:
        secs = r.total_ns / 1e9
        gflops = r.ops / secs / 1e9 if secs else 0.0
        gbps = r.mem / secs / 1e9 if secs else 0.0
        share = "-"
        if peak and secs:
            flops_share, bw_share = gflops / peak["gflops"], gbps / peak["gbps"]
            share = f"{100 * max(flops_share, bw_share):.0f}% " + ("fma" if flops_share >= bw_share else "bw")
        out.append((r.name + (" (jit)" if r.jit else ""), r.device, r.count, _ms(r.total_ns), _us(r.total_ns / r.count),
                    f"{100 * r.total_ns / total:.1f}%", f"{gflops:.2f}", f"{gbps:.2f}", share))
    header = ("kernel", "device", "count", "total ms", "mean us", "share", "GFLOPS", "GB/s", "of peak")
    text = markdown(header, out)
    if peak:
        text += f"\n\npeak here: {peak['gflops']:.0f} GFLOPS (f32 matmul), {peak['gbps']:.1f} GB/s (stream)"
    spans = [e for e in profile["events"] if e["kind"] in ("compile", "jit_capture", "jit_replay")]
    for kind in ("compile", "jit_capture", "jit_replay"):
        these = [e["dur_ns"] for e in spans if e["kind"] == kind]
        if these:
            text += f"\n{kind.replace('_', ' ')}: {len(these)} x, {_ms(sum(these))} ms"
    return text


def pmc_table(profile: dict[str, Any], item: str | None, counters: Sequence[str] | None) -> str:
    rows = kernel_rows(profile)
    if item is not None:
        keys = [r.name for r in rows] + [r.key for r in rows]
        chosen = pick(item, keys, "kernel")
        rows = [r for r in rows if chosen in (r.name, r.key)]
    have = sorted({n for r in rows for n in r.counters})
    refused = {name: why for dev in profile.get("devices", {}).values() for name, why in dev.get("refused", {}).items()}
    if counters:
        from tgcore.runtime.perfcounters import COUNTERS
        names = [pick(c, [*COUNTERS, "ipc"], "counter") for c in counters]
    else:
        names = have + (["ipc"] if {"cycles", "instructions"} <= set(have) else [])
    out = []
    for r in rows:
        if not r.counters:
            continue
        cells: list[Any] = [r.name + (" (jit)" if r.jit else ""), r.device, r.count]
        for n in names:
            if n == "ipc":
                cyc = r.counters.get("cycles", 0)
                cells.append(f"{r.counters.get('instructions', 0) / cyc:.2f}" if cyc else "-")
            else:
                cells.append(r.counters.get(n, "-"))
        out.append(cells)
    text = markdown(("kernel", "device", "runs", *names), out) if out else "no counters were recorded"
    if refused:
        text += "\n\nnot counted: " + "; ".join(f"{n}: {why}" for n, why in sorted(refused.items()))
    if any(r.jit and not r.counters for r in kernel_rows(profile)):
        text += "\nJIT replays through a native graph run as one call: their kernels have no counters of their own"
    return text


def diff_table(a: dict[str, Any], b: dict[str, Any]) -> str:
    rows_a = {r.key: r for r in kernel_rows(a)}
    rows_b = {r.key: r for r in kernel_rows(b)}
    out = []
    def most_time(key: str) -> int:
        return -max(r.total_ns for r in (rows_a.get(key), rows_b.get(key)) if r is not None)
    for key in sorted(rows_a.keys() | rows_b.keys(), key=most_time):
        ra, rb = rows_a.get(key), rows_b.get(key)
        mean_a = ra.total_ns / ra.count if ra else None
        mean_b = rb.total_ns / rb.count if rb else None
        ratio = f"{mean_b / mean_a:.2f}x" if mean_a and mean_b else "-"
        out.append((key, ra.count if ra else "-", _us(mean_a) if mean_a else "-", rb.count if rb else "-",
                    _us(mean_b) if mean_b else "-", ratio))
    total_a = sum(r.total_ns for r in rows_a.values())
    total_b = sum(r.total_ns for r in rows_b.values())
    text = markdown(("kernel", "runs A", "mean us A", "runs B", "mean us B", "B/A"), out)
    return text + f"\n\ntotal kernel time: A {_ms(total_a)} ms, B {_ms(total_b)} ms"


def chrome_trace(profile: dict[str, Any]) -> dict[str, Any]:
    """Chrome trace-event JSON: complete ("X") events, one track (tid) per device and event kind, named by
    metadata events."""
    pid = profile.get("pid", 0)
    tracks: dict[tuple[str, str], int] = {}
    events: list[dict[str, Any]] = []
    for e in profile["events"]:
        track = (e["device"], "kernels" if e["kind"] in ("kernel", "copy") else e["kind"])
        tid = tracks.setdefault(track, len(tracks) + 1)
        args = {"ops": e["ops"], "bytes": e["mem"], "threads": e["threads"], **e.get("counters", {})}
        events.append({"name": e["name"], "cat": e["kind"], "ph": "X", "ts": e["start_ns"] / 1e3,
                       "dur": e["dur_ns"] / 1e3, "pid": pid, "tid": tid, "args": args})
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": " ".join(profile.get("argv", []))
                                                                               or f"pid {pid}"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"{dev} {kind}"}}
             for (dev, kind), tid in tracks.items()]
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": {"tgcore": profile.get("tgcore"), "started": profile.get("started")}}


def describe(path: pathlib.Path, profile: dict[str, Any]) -> str:
    rows = kernel_rows(profile)
    kinds: dict[str, int] = {}
    for e in profile["events"]:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    lines = [f"{path}", f"  command:  {' '.join(profile.get('argv', [])) or '-'} (pid {profile.get('pid')}"
             + (f", rank {profile['rank']}" if profile.get("rank") is not None else "") + ")",
             f"  recorded: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(profile['started']))}, "
             f"{profile['duration_ns'] / 1e9:.2f} s, tgcore {profile.get('tgcore')}",
             "  events:   " + (", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"),
             f"  kernels:  {len(rows)} distinct, {sum(r.count for r in rows)} runs "
             f"({sum(r.count for r in rows if r.jit)} in JIT replays)"]
    for dev, info in sorted(profile.get("devices", {}).items()):
        lines.append(f"  counters on {dev}: {', '.join(info.get('counters', [])) or 'none'}"
                     + (f" (not counted: {', '.join(info['refused'])})" if info.get("refused") else ""))
    return "\n".join(lines)


# ---- commands ----

def cmd_profile(args: argparse.Namespace) -> int:
    command = [c for c in args.cmd if c != "--"] if args.cmd and args.cmd[0] == "--" else list(args.cmd)
    if not command:
        raise VizError("name a command to profile: tg profile [--out FILE] -- python script.py ...")
    out = pathlib.Path(args.out) if args.out else None
    target = out or pathlib.Path(tempfile.mkdtemp(prefix="tg-profile-")) / "profile.json"
    env = {**os.environ, "PROFILE": "1", "TG_PROFILE_OUT": str(target), "TG_PROFILE_QUIET": "1"}
    if args.no_counters:
        env["PROFILE_COUNTERS"] = "0"
    try:
        code = subprocess.call(command, env=env)
    except FileNotFoundError:
        raise VizError(f"no such command: {command[0]}") from None
    if not target.exists():
        print(f"tg profile: {command[0]} ran no tgcore code (no profile was written)", file=sys.stderr)
        return code or 1
    if out is None:  # keep it with the others
        kept = profiles_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
        kept.parent.mkdir(parents=True, exist_ok=True)
        target.replace(kept)
        target.parent.rmdir()
        target = kept
    print(profile_table(load_profile(target), None if args.no_peak else machine_peak(args.refresh_peak), top=args.top))
    print(f"\nprofile: {target}")
    return code


def cmd_list(args: argparse.Namespace) -> int:
    if args.profile:
        path = find_profile(args.profile)
        print(describe(path, load_profile(path)))
        return 0
    found = sorted(profiles_dir().glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        print(f"no profiles under {profiles_dir()}")
        return 0
    for p in found:
        print(f"{p}  {p.stat().st_size / 1e3:.0f} kB")
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    profile = load_profile(find_profile(args.profile))
    print(profile_table(profile, None if args.no_peak else machine_peak(args.refresh_peak), top=args.top))
    return 0


def cmd_pmc(args: argparse.Namespace) -> int:
    print(pmc_table(load_profile(find_profile(args.profile)), args.item, args.counter))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    print(diff_table(load_profile(args.a), load_profile(args.b)))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    path = find_profile(args.profile)
    trace = chrome_trace(load_profile(path))
    out = pathlib.Path(args.out) if args.out else path.with_suffix(".trace.json")
    write_atomically(out, json.dumps(trace).encode())
    print(f"wrote {out} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from tgcore.vizserver import TraceError, load_trace, make_server
    if args.trace is not None:
        path = pathlib.Path(args.trace)
    else:
        found = sorted((cache_dir() / "viz").glob("*.json"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise VizError(f"no rewrite traces under {cache_dir() / 'viz'}: record one with VIZ=1 python script.py")
        path = found[-1]
    try:
        trace = load_trace(path)
    except TraceError as e:
        raise VizError(str(e)) from None
    profile = load_profile(args.profile) if args.profile else None
    try:
        server = make_server(trace, profile, args.port)
    except OSError as e:
        raise VizError(f"cannot listen on 127.0.0.1:{args.port} ({e.strerror or e}); choose another with --port") \
            from None
    print(f"tg viz: {path} ({len(trace['kernels'])} kernels) on http://127.0.0.1:{server.server_port}/ "
          "(Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _guarded(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except VizError as e:
            print(f"tg: {e}", file=sys.stderr)
            return 2
    return run


def add_commands(sub: argparse._SubParsersAction) -> None:
    """``tg profile`` and ``tg viz ...`` on the ``tg`` parser."""
    prof = sub.add_parser("profile", help="run a command with PROFILE=1 and print its kernel table")
    prof.add_argument("--out", help="where to write the profile (default: under TG_CACHE_DIR/profiles)")
    prof.add_argument("--no-counters", action="store_true", help="do not read performance counters")
    prof.add_argument("--no-peak", action="store_true", help="do not measure or show the machine's peak")
    prof.add_argument("--refresh-peak", action="store_true", help="measure the machine's peak again (quiet machine)")
    prof.add_argument("--top", type=int, help="show only the N kernels with the most time")
    prof.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    prof.set_defaults(func=_guarded(cmd_profile))
    viz = sub.add_parser("viz", help="read profiles: list, profile, pmc, diff, export")
    vsub = viz.add_subparsers(dest="viz_command", metavar="WHAT", required=True)
    p = vsub.add_parser("list", help="the profiles there are, or what one holds")
    p.add_argument("profile", nargs="?")
    p.set_defaults(func=_guarded(cmd_list))
    p = vsub.add_parser("profile", help="a table per kernel: time, share, GFLOPS, GB/s, share of peak")
    p.add_argument("profile", nargs="?", help="profile file (default: the newest)")
    p.add_argument("--top", type=int, help="only the N kernels with the most time")
    p.add_argument("--no-peak", action="store_true", help="do not measure or show the machine's peak")
    p.add_argument("--refresh-peak", action="store_true", help="measure the machine's peak again (quiet machine)")
    p.set_defaults(func=_guarded(cmd_table))
    p = vsub.add_parser("pmc", help="performance counters per kernel (GitHub markdown)")
    p.add_argument("profile", nargs="?", help="profile file (default: the newest)")
    p.add_argument("--item", help="one kernel, by name or DEVICE/name")
    p.add_argument("--counter", action="append", help="a counter to show (repeatable; default: all recorded)")
    p.set_defaults(func=_guarded(cmd_pmc))
    p = vsub.add_parser("diff", help="compare two profiles kernel by kernel")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(func=_guarded(cmd_diff))
    p = vsub.add_parser("export", help="write a Chrome/Perfetto trace")
    p.add_argument("profile", nargs="?", help="profile file (default: the newest)")
    p.add_argument("--format", choices=["chrome"], default="chrome")
    p.add_argument("--out", help="output file (default: next to the profile, .trace.json)")
    p.set_defaults(func=_guarded(cmd_export))
    p = vsub.add_parser("serve", help="a local page: kernels, passes, graphs, rules, code, the timeline")
    p.add_argument("trace", nargs="?", help="rewrite trace from VIZ=1 (default: the newest)")
    p.add_argument("--profile", help="a profile whose timeline to show")
    p.add_argument("--port", type=int, default=8001, help="port on 127.0.0.1 (default 8001)")
    p.set_defaults(func=_guarded(cmd_serve))
