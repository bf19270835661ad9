"""The tgcore plugin ``gguf``: the ``.gguf`` loader for ``tgcore.load`` and the ``tg gguf`` command.

Cheap to import: the reader (and numpy, for dequantization) load when first used.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

import tgcore

TG_HOOKSPEC_VERSION = 1


def load_gguf(path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """``tgcore.load`` entry: open a GGUF file and return a ``tg_gguf.GGUFFile``."""
    from tg_gguf.reader import load
    if kwargs:
        raise TypeError(f"the gguf loader takes no options, got {', '.join(sorted(kwargs))}")
    return load(path)


@tgcore.hookimpl
def tg_register_loaders(register: Any) -> None:
    register("gguf", load_gguf, suffixes=(".gguf",), magic=(b"GGUF",))


@tgcore.hookimpl
def tg_add_commands(subparsers: argparse._SubParsersAction) -> None:
    from tg_gguf.cli import add_commands
    add_commands(subparsers)
