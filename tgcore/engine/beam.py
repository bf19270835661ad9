"""BEAM: time candidate optimization lists of a kernel on its device, keep the fastest, remember it on disk.

In:  a prepared kernel (``tgcore.codegen.Kernel``), its renderer and the device it runs on; the ``BEAM`` flag.
Out: the kernel's opts list. ``beam_policy(dev)`` is the ``OptPolicy`` that ``realize.get_runner`` hands to
     ``get_program``, so this runs once per kernel per process, when the kernel is compiled.

- Without ``BEAM`` a winner stored earlier is used when there is one, else the heuristic: one memoized file
  lookup per kernel, nothing timed.
- With ``BEAM=N`` a kernel without a stored winner (or with one from a search of fewer than N lists) is
  searched: up to N lists from ``codegen.search.candidates`` (the heuristic's first), each lowered, compiled
  and run ``RUNS`` times (more for a fast kernel) on scratch buffers of the kernel's argument sizes (never the
  user's buffers: a TILE'd kernel reads its output). A candidate's runs stop once they pass its time cap; one
  still running at the cap ends the search (the fastest so far wins). A candidate that fails to lower, compile
  or run is skipped (its error printed at ``DEBUG>=2``). A search longer than ``PROGRESS_AFTER`` seconds shows
  its progress on stderr and ends with a one-line summary (always printed at ``DEBUG>=1``). The fastest list is
  stored. A kernel whose addresses depend on loaded data (a gather) is not searched: scratch inputs could send
  it out of bounds.

Cache: ``<cache_dir()>/beam/<key[:2]>/<key>.json``. The key is the sha256 of the kernel's fingerprint
(``codegen.search.kernel_fingerprint``: ops, dtypes, args and source positions of the prepared kernel), the
device, the renderer (class, name and the vector facts codegen reads), its compiler's identity (for C: the
compiler binary and the flags it was verified to build with), the CPU's identity, the chosen ISA level, the threads
and the tgcore version. An entry is JSON ``{format, key, opts, meta, checksum}`` (``checksum``: sha256
of the rest), written to a temp file and renamed into place. An entry that does not parse, fails its checksum,
belongs to another key, names an unknown op or no longer applies to the kernel is ignored with a warning naming
the file; the heuristic is used (a BEAM search replaces the entry).
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import tgcore
from tgcore.codegen import Kernel, OptPolicy, default_policy, lower_kernel
from tgcore.codegen.optimize import Opt, apply_opts
from tgcore.codegen.search import candidates, kernel_fingerprint, opts_from_data, opts_to_data
from tgcore.dtype import dtypes
from tgcore.helpers import BEAM, DEBUG, cache_dir, write_atomically
from tgcore.renderer import Renderer
from tgcore.runtime.cpufeatures import IsaLevelError, chosen_isa_level, cpu_features
from tgcore.uop import Ops

ENTRY_FORMAT = 2            # bump when the entry layout or the key's parts change
RUNS = 3                    # runs per candidate; its time is the fastest ...
MAX_RUNS = 20               # ... and more, up to this many, while they add up to less than
MIN_TIMED = 2e-3            # this many seconds (a kernel of microseconds needs more runs to show its speed)
PROGRESS_AFTER = 1.0        # seconds of searching after which progress goes to stderr (and a summary at the end)
FIRST_CAP = 60.0            # seconds the heuristic's list (the first candidate) may take
TIME_CAP = 2.0              # seconds any later candidate may take at least ...
TIME_CAP_FACTOR = 20        # ... or this many times the fastest run so far, if longer


class BeamStats:
    """What BEAM did in this process (tests check that a cache hit times nothing)."""
    searches = 0            # searches run
    timed = 0               # candidates run on the device
    hits = 0                # kernels whose opts came from a stored winner


# ---- the policy ----

def beam_policy(dev: Any) -> OptPolicy:
    """The policy for kernels compiled for ``dev``: see the module docstring."""
    def policy(kernel: Kernel, renderer: Renderer, threads: int) -> list[Opt]:
        return choose_opts(dev, kernel, renderer, threads)
    return policy


def choose_opts(dev: Any, kernel: Kernel, renderer: Renderer, threads: int) -> list[Opt]:
    """A stored winner, else (with BEAM) a search's, else the heuristic's list."""
    budget = int(BEAM.value)
    if budget <= 0 and winners.empty():  # nothing was ever stored here: no key to make, no file to look for
        return default_policy(kernel, renderer, threads)
    key = cache_key(dev.name, kernel, renderer, threads)
    if key is not None:
        winner = winners.lookup(key, kernel, renderer)
        if winner is not None and (budget <= 0 or winner.budget >= budget):
            BeamStats.hits += 1
            return list(winner.opts)
    if budget <= 0:
        return default_policy(kernel, renderer, threads)
    result = search(dev, kernel, renderer, threads, budget)
    if result is None:
        return default_policy(kernel, renderer, threads)
    if key is not None:
        winners.store(key, Winner(tuple(result.opts), budget), result.meta())
    return result.opts


# ---- the cache ----

@dataclass(frozen=True)
class CacheKey:
    digest: str
    parts: dict[str, Any]   # what went into the digest (less the fingerprint): stored with the entry, for people


def cache_key(device: str, kernel: Kernel, renderer: Renderer, threads: int) -> CacheKey | None:
    """The key of ``kernel`` on ``device`` and ``renderer`` here (None: the kernel has no stable fingerprint)."""
    fingerprint = kernel_fingerprint(kernel.ast)
    if fingerprint is None:
        return None
    parts = {"kernel": kernel.name, **machine_parts(device, renderer, threads)}
    text = json.dumps({"format": ENTRY_FORMAT, **parts, "fingerprint": fingerprint}, sort_keys=True)
    return CacheKey(hashlib.sha256(text.encode()).hexdigest(), parts)


def machine_parts(device: str, renderer: Renderer, threads: int) -> dict[str, Any]:
    """What a kernel's cache keys hold besides the kernel: the device, the renderer, its compiler, the CPU, the
    chosen ISA level, the threads and the tgcore version (``engine.programs`` keys use them too)."""
    try:
        level = chosen_isa_level()
        isa = level.name if level is not None else "none"
    except IsaLevelError as e:  # the compiler will say so; the key only needs to differ
        isa = f"invalid ({e})"
    return {"device": device, "renderer": renderer_identity(renderer), "compiler": compiler_identity(renderer),
            "cpu": cpu_features().identity, "isa": isa, "threads": threads, "version": tgcore.__version__}


def winner_stamp(device: str, kernel: Kernel, renderer: Renderer, threads: int) -> str:
    """Which stored winner the policy read for ``kernel``: ``"none"`` (none stored anywhere), ``"unkeyed"`` (the
    kernel has no key: never one), else its key's digest and the sha256 of the file there (``absent``). A generated
    program made with it stays valid while ``winner_still(stamp)``."""
    if winners.empty():
        return "none"
    key = cache_key(device, kernel, renderer, threads)
    return "unkeyed" if key is None else f"{key.digest}:{_file_digest(WinnerCache.path(key.digest))}"


def winner_still(stamp: str) -> bool:
    """Whether the stored winners are still as ``winner_stamp`` found them."""
    if stamp == "none":
        return winners.empty()
    if stamp == "unkeyed":
        return True
    digest, _, sha = stamp.partition(":")
    return _file_digest(WinnerCache.path(digest)) == sha


def _file_digest(path: pathlib.Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "absent"


def renderer_identity(renderer: Renderer) -> str:
    """The renderer's class and name, and the facts codegen reads that can differ between instances."""
    cls = type(renderer)
    facts = [f"vector_bits={renderer.vector_bits!r}", f"vector_registers={renderer.vector_registers!r}"]
    return f"{cls.__module__}.{cls.__qualname__}|{renderer.device}:{renderer.name}|" \
           + " ".join(facts)


def compiler_identity(renderer: Renderer) -> str:
    """What the renderer's compiler says it is (its disk-cache identity: for C the binary and the flags actually
    used, which the ISA verification may have lowered), or its class when it has none."""
    compiler = renderer.compiler
    if compiler is None:
        return "none"
    try:
        identity = compiler.cache_identity()
    except Exception as e:  # noqa: BLE001 (a missing compiler fails later, where it is used; the key only differs)
        return f"{type(compiler).__qualname__} (unavailable: {e})"
    return identity if identity is not None else type(compiler).__qualname__


@dataclass(frozen=True)
class Winner:
    opts: tuple[Opt, ...]
    budget: int             # the BEAM value of the search that chose it


class WinnerCache:
    """The owner of stored winners: files under ``cache_dir()/beam`` and an in-process memo of what each key's file
    held (a missing or rejected file is memoized as None, so it is read and warned about once)."""

    def __init__(self) -> None:
        self._memo: dict[pathlib.Path, Winner | None] = {}  # (the path names the key's digest)
        self._lock = threading.Lock()
        self._folders: dict[pathlib.Path, bool] = {}  # winners folder -> whether it exists (asked once each)

    @staticmethod
    def folder() -> pathlib.Path:
        return cache_dir() / "beam"

    @classmethod
    def path(cls, digest: str) -> pathlib.Path:
        return cls.folder() / digest[:2] / f"{digest}.json"

    def empty(self) -> bool:
        """No winner was ever stored under this cache directory (its folder is looked for once per process)."""
        folder = self.folder()
        with self._lock:
            if folder not in self._folders:
                self._folders[folder] = folder.is_dir()
            return not self._folders[folder]

    def lookup(self, key: CacheKey, kernel: Kernel, renderer: Renderer) -> Winner | None:
        """The stored winner for ``key``, checked against ``kernel``; None when there is none or it is unusable."""
        path = self.path(key.digest)
        with self._lock:
            if path in self._memo:
                return self._memo[path]
        winner = _read_winner(path, key.digest, kernel, renderer)
        with self._lock:
            self._memo[path] = winner
        return winner

    def store(self, key: CacheKey, winner: Winner, meta: dict[str, Any]) -> None:
        """Write ``winner`` for ``key`` (atomically; an unwritable cache is skipped with a warning)."""
        path = self.path(key.digest)
        body = {"format": ENTRY_FORMAT, "key": key.digest, "opts": opts_to_data(list(winner.opts)),
                "budget": winner.budget, "meta": {**key.parts, **meta}}
        entry = {**body, "checksum": _checksum(body)}
        try:
            write_atomically(path, json.dumps(entry, indent=1, sort_keys=True).encode())
        except OSError as e:
            warnings.warn(f"BEAM: could not store the winner in {path} ({e}); it holds for this process only",
                          stacklevel=2)
        with self._lock:
            self._memo[path] = winner
            self._folders[self.folder()] = True  # (known to this process even if the file could not be written)

    def forget(self) -> None:
        """Drop the memo (the files stay): the next lookups read the disk again."""
        with self._lock:
            self._memo.clear()
            self._folders.clear()


winners = WinnerCache()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class _Unusable(Exception):
    """Why a cache entry cannot be used."""


def _read_winner(path: pathlib.Path, digest: str, kernel: Kernel, renderer: Renderer) -> Winner | None:
    """The winner in ``path``, None when there is no file; an unusable file is warned about (naming it) and None."""
    try:
        return _parse_winner(path.read_bytes(), digest, kernel, renderer)
    except FileNotFoundError:
        return None
    except (OSError, _Unusable) as e:
        why = f"cannot be read ({e})" if isinstance(e, OSError) else str(e)
        warnings.warn(f"BEAM cache entry {path} {why}: ignored, the heuristic's opts are used "
                      "(delete the file, or run with BEAM set to replace it)", stacklevel=4)
        return None


def _parse_winner(raw: bytes, digest: str, kernel: Kernel, renderer: Renderer) -> Winner:
    try:
        entry = json.loads(raw)
    except ValueError as e:
        raise _Unusable(f"is not valid JSON ({e})") from None
    if not isinstance(entry, dict) or not {"format", "key", "opts", "budget", "meta", "checksum"} <= entry.keys():
        raise _Unusable("is not a BEAM entry (fields missing)")
    body = {k: v for k, v in entry.items() if k != "checksum"}
    if entry["checksum"] != _checksum(body):
        raise _Unusable("fails its checksum (corrupt or edited)")
    if entry["format"] != ENTRY_FORMAT or entry["key"] != digest or type(entry["budget"]) is not int:
        raise _Unusable(f"was written for another key or entry format ({entry['format']!r})")
    try:
        opts = opts_from_data(entry["opts"])
        apply_opts(kernel.ast, opts, renderer)
    except ValueError as e:  # an unknown op, or (OptError) a list that no longer fits the kernel
        raise _Unusable(f"holds a stale opts list ({e})") from None
    return Winner(tuple(opts), entry["budget"])


# ---- the search ----

@dataclass
class SearchResult:
    opts: list[Opt]
    time_s: float | None            # the winner's fastest run (None: nothing was timed)
    heuristic_s: float | None       # the heuristic's (None: it failed)
    tried: int                      # candidates timed
    offered: int                    # candidates generated
    elapsed_s: float
    note: str = ""                  # why the search stopped early, if it did
    failures: list[str] = field(default_factory=list)

    def meta(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "heuristic_s": self.heuristic_s, "tried": self.tried, "offered": self.offered,
                "search_s": round(self.elapsed_s, 3), "note": self.note}


class CandidateTimeout(RuntimeError):
    """A candidate was still running at its time cap."""


def search(dev: Any, kernel: Kernel, renderer: Renderer, threads: int, budget: int) -> SearchResult | None:
    """Time up to ``budget`` candidate lists of ``kernel`` on ``dev``; the fastest, or None when the kernel cannot be
    searched (its addresses depend on loaded data, so scratch inputs could send it out of bounds) or no candidate
    ran."""
    if _data_dependent_addresses(kernel):
        if DEBUG >= 1:
            print(f"BEAM {kernel.name}: not searched (addresses depend on loaded data)", file=sys.stderr)
        return None
    start = time.perf_counter()
    lists = candidates(kernel.ast, renderer, threads, kernel.work, budget)
    BeamStats.searches += 1
    if len(lists) <= 1:  # nothing to compare: the one list there is
        return SearchResult(lists[0] if lists else [], None, None, 0, len(lists), time.perf_counter() - start)
    scratch = _scratch_buffers(dev, kernel)
    maxes = {u.arg[0]: u.arg[2] for u in kernel.ast.toposort if u.op is Ops.DEFINE_VAR}
    vals = tuple(maxes[v] for v in kernel.vars)
    progress = _Progress(kernel.name, len(lists), start)
    best: tuple[float, list[Opt]] | None = None
    heuristic_s: float | None = None
    tried, note, failures = 0, "", []
    for i, opts in enumerate(lists):
        cap = FIRST_CAP if best is None else max(TIME_CAP, TIME_CAP_FACTOR * best[0])
        try:
            t = time_candidate(dev, kernel, renderer, opts, scratch, vals, cap)
        except CandidateTimeout as e:
            note = f"stopped at candidate {i + 1}: {e}"
            break
        except Exception as e:  # a list the renderer or compiler cannot take: skip it
            failures.append(f"[{', '.join(map(str, opts))}]: {type(e).__name__}: {e}")
            if DEBUG >= 2:
                print(f"BEAM {kernel.name}: candidate {i + 1} failed: {failures[-1]}", file=sys.stderr)
        else:
            tried += 1
            if i == 0:
                heuristic_s = t
            if best is None or t < best[0]:
                best = (t, opts)
        finally:
            progress.update(i + 1, best)
    if best is None:
        progress.done(None)
        return None
    result = SearchResult(best[1], best[0], heuristic_s, tried, len(lists), time.perf_counter() - start, note,
                          failures)
    progress.done(result, dev.name)
    return result


def time_candidate(dev: Any, kernel: Kernel, renderer: Renderer, opts: list[Opt], buffers: list[Any],
                   vals: tuple[int, ...], cap: float) -> float:
    """Lower, compile and run ``opts`` on ``buffers``: the fastest of ``RUNS`` runs (up to ``MAX_RUNS`` while they
    total less than ``MIN_TIMED``; fewer once they total more than ``cap``), in seconds. Raises CandidateTimeout when a
    run is still going at ``cap``."""
    from tgcore.engine.realize import build_program  # (realize imports this module)
    spec = lower_kernel(kernel, renderer, opts)
    program = build_program(dev, spec, disk_cache=False)  # losers would only fill the compile cache
    BeamStats.timed += 1
    times: list[float] = []
    errors: list[BaseException] = []

    def run() -> None:  # (holds ``buffers``: a run still going after the cap writes to live memory)
        handles = [b.ensure_allocated().handle for b in buffers]
        try:
            for i in range(MAX_RUNS):
                begin = time.perf_counter()
                measured = program(*handles, vals=vals, threads=spec.threads, wait=True)
                dev.synchronize()
                times.append(measured if measured is not None else time.perf_counter() - begin)
                total = sum(times)
                if total > cap or (i + 1 >= RUNS and total >= MIN_TIMED):
                    break
        except BaseException as e:  # noqa: B036 (reported by the caller's thread)
            errors.append(e)
    worker = threading.Thread(target=run, name=f"beam-{spec.name}", daemon=True)
    worker.start()
    worker.join(cap)
    if worker.is_alive():
        raise CandidateTimeout(f"[{', '.join(map(str, opts))}] still running after {cap:.1f}s")
    if errors:
        raise errors[0]
    return min(times)


def _data_dependent_addresses(kernel: Kernel) -> bool:
    """Whether some access's index depends on a loaded value (a gather)."""
    return any(u.op is Ops.INDEX and len(u.src) > 1 and any(s.op is Ops.LOAD for s in u.src[1].toposort)
               for u in kernel.ast.toposort)


def _scratch_buffers(dev: Any, kernel: Kernel) -> list[Any]:
    """One buffer per kernel argument, of its size and dtype: integers hold 1 (no division by zero), floats 0."""
    from tgcore.runtime.buffer import Buffer
    params = sorted((u for u in kernel.ast.toposort if u.op is Ops.PARAM), key=lambda u: u.arg)
    buffers = []
    for p in params:
        base, size = p.dtype.base, max(p.dtype.size, 1)  # type: ignore[attr-defined]
        one = b"\0" * base.itemsize if dtypes.is_float(base) else (1).to_bytes(base.itemsize, "little")
        buffers.append(Buffer(dev, size, base).copyin(one * size))
    return buffers


class _Progress:
    """Progress lines on stderr once a search has run ``PROGRESS_AFTER`` seconds; a summary line at the end."""

    def __init__(self, name: str, total: int, start: float) -> None:
        self.name, self.total, self.start = name, total, start
        self.shown = False
        self.tty = sys.stderr.isatty()

    def update(self, done: int, best: tuple[float, list[Opt]] | None) -> None:
        if time.perf_counter() - self.start < PROGRESS_AFTER:
            return
        self.shown = True
        best_text = f"best {best[0] * 1e3:.3f} ms [{', '.join(map(str, best[1]))}]" if best else "no candidate ran yet"
        line = f"BEAM {self.name}: {done}/{self.total} candidates, {best_text}"
        if self.tty:  # one line, rewritten
            print(f"\r{line}\x1b[K", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def done(self, result: SearchResult | None, device: str = "") -> None:
        if self.shown and self.tty:
            print(file=sys.stderr)
        if not (self.shown or DEBUG >= 1):
            return
        if result is None:
            print(f"BEAM {self.name}: no candidate ran, the heuristic's opts are used", file=sys.stderr)
            return
        opts = f"[{', '.join(map(str, result.opts))}]"
        timing = ""
        if result.time_s is not None:
            timing = f" {result.time_s * 1e3:.3f} ms"
            if result.heuristic_s:
                speedup = result.heuristic_s / result.time_s
                timing += f" ({speedup:.2f}x the heuristic's {result.heuristic_s * 1e3:.3f} ms)"
        note = f"; {result.note}" if result.note else ""
        print(f"BEAM {self.name} on {device}: {opts}{timing}, {result.tried}/{result.offered} candidates in "
              f"{result.elapsed_s:.2f}s{note}", file=sys.stderr)
