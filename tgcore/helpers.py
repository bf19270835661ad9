"""Small shared helpers: typed environment flags, terminal colours, raw memory views.

In: environment variables, plain Python values, raw addresses.
Out: typed values, strings, memoryviews.

This module is imported almost everywhere, so it imports nothing heavy (no numpy).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import gc
import operator
import os
import pathlib
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_TRUE_WORDS = {"1", "true", "yes", "on", "y"}
_FALSE_WORDS = {"0", "false", "no", "off", "n", ""}


def getenv(key: str, default: Any = 0) -> Any:
    """Read environment variable `key`, converted to the type of `default`.

    int default -> int, bool default -> bool ("1/true/yes/on" or "0/false/no/off"),
    str default -> str. An unset or empty variable gives `default`. The environment is
    read on every call, so tests can change it with monkeypatch.
    """
    raw = os.environ.get(key)
    if raw is None:
        return default
    raw = raw.strip()
    if isinstance(default, bool):  # before int: bool is a subclass of int
        word = raw.lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        raise ValueError(f"environment variable {key}={raw!r} is not a boolean (use 1/0, true/false, yes/no)")
    if isinstance(default, int):
        if raw == "":
            return default
        try:
            return int(raw, 0)
        except ValueError:
            raise ValueError(f"environment variable {key}={raw!r} is not an integer") from None
    if isinstance(default, float):
        return float(raw) if raw else default
    return raw


_UNSET = object()  # marks "no Context override"
# the mapping behind os.environ (CPython keeps the encoded strings in ``_data``; os.environ writes go through it), or
# None where it is not there (then flags read os.environ itself)
_ENV_STORE: dict[Any, Any] | None = getattr(os.environ, "_data", None) if hasattr(os.environ, "encodekey") else None


class ContextVar:
    """A named flag: its value comes from the environment unless a `Context` overrides it.

    `DEBUG.value` is read at call time. Comparisons work on the value (`DEBUG >= 2`).
    Overrides are per thread/async context (backed by `contextvars`).
    """

    _registry: dict[str, ContextVar] = {}

    def __init__(self, key: str, default: Any):
        if key in ContextVar._registry:
            raise ValueError(f"ContextVar {key} is already defined")
        self.key = key
        self.default = default
        self._override: contextvars.ContextVar[Any] = contextvars.ContextVar(f"tgcore.{key}", default=_UNSET)
        self._env_key: Any = os.environ.encodekey(key) if _ENV_STORE is not None else key  # type: ignore[attr-defined]
        self._raw: Any = _UNSET
        self._parsed: Any = default
        ContextVar._registry[key] = self

    @property
    def value(self) -> Any:
        override = self._override.get()
        if override is not _UNSET:
            return override
        # os.environ's own store, read without its str conversions (a few flags are read per kernel run); parsed
        # only when the environment changed
        raw = _ENV_STORE.get(self._env_key) if _ENV_STORE is not None else os.environ.get(self.key)
        if raw != self._raw:
            self._raw, self._parsed = raw, getenv(self.key, self.default)
        return self._parsed

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __ge__(self, other: Any) -> bool:
        return bool(self.value >= other)

    def __gt__(self, other: Any) -> bool:
        return bool(self.value > other)

    def __le__(self, other: Any) -> bool:
        return bool(self.value <= other)

    def __lt__(self, other: Any) -> bool:
        return bool(self.value < other)

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value!r})"


@contextlib.contextmanager
def Context(**overrides: Any) -> Iterator[None]:
    """Temporarily set flags: `with Context(DEBUG=2): ...`. Unknown names raise KeyError."""
    tokens = []
    try:
        for key, value in overrides.items():
            if key not in ContextVar._registry:
                known = ", ".join(sorted(ContextVar._registry))
                raise KeyError(f"unknown flag {key!r}; known flags: {known}")
            var = ContextVar._registry[key]
            tokens.append((var, var._override.set(value)))
        yield
    finally:
        for var, token in reversed(tokens):
            var._override.reset(token)


DEBUG = ContextVar("DEBUG", 0)
BEAM = ContextVar("BEAM", 0)  # >0: time up to BEAM optimization lists per new kernel, keep the fastest (engine/beam.py)


# ---- numbers and sequences ----

def prod(xs: Iterable[Any], start: Any = 1) -> Any:
    """Product of `xs` (works for ints and symbolic values with `*`)."""
    return functools.reduce(operator.mul, xs, start)


def round_up(x: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= x."""
    return (x + multiple - 1) // multiple * multiple


def ceildiv(a: int, b: int) -> int:
    """ceil(a / b) for integers."""
    return -(-a // b)


def dedup(xs: Iterable[T]) -> list[T]:
    """Drop repeated items, keep first-seen order."""
    return list(dict.fromkeys(xs))


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    """One level of flattening."""
    return [x for xs in xss for x in xs]


def all_same(xs: Iterable[Any]) -> bool:
    """True if every item equals the first (True for empty input)."""
    items = list(xs)
    return all(x == items[0] for x in items[1:])


# ---- terminal ----

_COLORS = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def colored(text: str, color: str | None, background: bool = False) -> str:
    """Wrap `text` in an ANSI colour; `color` is a name like "red" or "BRIGHT_red"/"RED" (bright)."""
    if color is None:
        return text
    name = color.lower().removeprefix("bright_")
    if name not in _COLORS:
        raise ValueError(f"unknown colour {color!r}; use one of {sorted(_COLORS)}")
    bright = color.isupper() or color.lower().startswith("bright_")
    code = _COLORS[name] + (60 if bright else 0) + (10 if background else 0)
    return f"\x1b[{code}m{text}\x1b[0m"


def ansistrip(text: str) -> str:
    """`text` without ANSI colour codes."""
    return _ANSI_RE.sub("", text)


def ansilen(text: str) -> int:
    """Printed width of `text`: its length without ANSI colour codes."""
    return len(ansistrip(text))


# ---- machine ----

def to_mv(ptr: int, size: int) -> memoryview:
    """A writable byte memoryview over `size` bytes at raw address `ptr` (no copy, no ownership)."""
    return memoryview((ctypes.c_uint8 * size).from_address(ptr)).cast("B")


def cpu_count() -> int:
    """Worker threads for CPU kernels: env CPU_COUNT, else the cores this process may use."""
    forced = getenv("CPU_COUNT", 0)
    if forced > 0:
        return int(forced)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def write_atomically(path: pathlib.Path, data: bytes) -> None:
    """``data`` into ``path`` through a temp file renamed into place (a reader sees the old file or the new one,
    never half of one); the folder is made if missing. Raises OSError; the temp file never stays behind."""
    import tempfile
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def cache_dir() -> pathlib.Path:
    """Where tgcore keeps caches: env TG_CACHE_DIR, else the user cache dir + "/tgcore".

    The directory is not created here; writers create it when they first write.
    """
    forced = os.environ.get("TG_CACHE_DIR")
    if forced:
        return pathlib.Path(forced).expanduser()
    if sys.platform == "darwin":
        base = pathlib.Path.home() / "Library" / "Caches"
    elif sys.platform == "win32":
        base = pathlib.Path(os.environ.get("LOCALAPPDATA") or pathlib.Path.home() / "AppData" / "Local")
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
    return base / "tgcore"


class _GCPause:
    """How many pauses are open, and whether the collector was on when the first began: pauses on several threads
    overlap, so the last to end turns it back on (never one while another still runs)."""
    lock = threading.Lock()
    active = 0
    was_enabled = False


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: graph rewrites and ISA renders allocate many short-lived objects that
    reference counting frees, and the collections their allocation triggers would only walk them and the process's
    long-lived graphs (graph_rewrite: ~2x on large graphs; an X86 render: 5-10%). Pauses nest and overlap across
    threads: when the last one ends the collector is on again if it was when the first began (a caller's
    ``gc.disable()`` is kept); garbage made meanwhile waits for its next collection."""
    with _GCPause.lock:
        if _GCPause.active == 0:
            _GCPause.was_enabled = gc.isenabled()
            gc.disable()
        _GCPause.active += 1
    try:
        yield
    finally:
        with _GCPause.lock:
            _GCPause.active -= 1
            if _GCPause.active == 0 and _GCPause.was_enabled:
                gc.enable()


def save_recording(what: str, save: Callable[[str | None], str], out_var: str, show: str) -> None:
    """Write a recording (a profile, a rewrite trace) at exit: ``save(path)`` to ``$out_var`` if set (else its default
    place); one line on stderr saying where (``show``: the command that reads it), or why it could not be written.
    ``TG_PROFILE_QUIET`` silences the success line (``tg profile`` prints its own)."""
    try:
        where = save(os.environ.get(out_var) or None)
    except OSError as e:
        print(f"tgcore: could not write the {what}: {e}", file=sys.stderr)
        return
    if not os.environ.get("TG_PROFILE_QUIET"):
        print(f"tgcore: {what} written to {where} ({show} {where})", file=sys.stderr)
