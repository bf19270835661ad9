"""``tgcore.load(path)``: open a file with the loader a plugin registered for it.

The loader is chosen by the file's leading bytes (magic) first, then by its suffix.
"""
from __future__ import annotations

import os
from typing import Any

from tgcore.plugins.known import install_hint
from tgcore.plugins.manager import PluginHost, get_host
from tgcore.plugins.registry import LoaderEntry

MAGIC_BYTES = 64


class NoLoaderError(ValueError):
    """No registered loader understands this file."""


def find_loader(path: str | os.PathLike[str], host: PluginHost | None = None) -> LoaderEntry:
    host = host or get_host()
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory; tgcore.load opens files")
    with open(path, "rb") as f:
        head = f.read(MAGIC_BYTES)
    for entry in host.registry.loaders:
        if any(m and head.startswith(m) for m in entry.magic):
            return entry
    suffix = os.path.splitext(path)[1].lower()
    for entry in host.registry.loaders:
        if suffix in entry.suffixes:
            return entry
    known = sorted({s for e in host.registry.loaders for s in e.suffixes})
    msg = f"no loader for {path!r} (suffix {suffix or 'none'!r}); registered suffixes: {', '.join(known) or 'none'}"
    hint = install_hint("loader", suffix)
    raise NoLoaderError(f"{msg}. {hint}" if hint else msg)


def load(path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """Open ``path`` with the matching plugin loader and return what the loader returns."""
    return find_loader(path).load(os.fspath(path), **kwargs)
