"""Is the installed ``tgcore`` distribution this project's?

An unrelated package named ``tgcore`` is on PyPI (TGCoreSDK, a Telegram framework, 1.0.x). Our plugins
pin ``tgcore==VERSION`` so pip cannot pick it, but it can still end up installed next to our code (an
explicit ``pip install tgcore``, our modules run from a clone). Plugins loaded then would run on a
core whose installed metadata is someone else's, so the plugin loader refuses them with this message.

In: the metadata of the distribution named ``tgcore`` that importlib finds first on ``sys.path``.
Out: ``None`` when it carries our classifier (``MARKER``, set in pyproject.toml) or when no such
distribution is installed (tgcore run from a source tree); else a message naming the package found.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tgcore.plugins.known import IN_A_CLONE, install_command

MARKER = "Private :: tgcore :: tensor compiler"  # a classifier of our distribution (pyproject.toml)


def _installed(name: str) -> Any:
    import importlib_metadata
    try:
        return importlib_metadata.distribution(name)
    except importlib_metadata.PackageNotFoundError:
        return None


def _headers(dist: Any) -> dict[str, list[str]]:
    """The core metadata fields of ``dist`` (read by hand: the email parser behind ``.metadata`` costs ~0.1 s
    on every ``tg`` start, most of it parsing the long description that follows the headers)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    fields: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(": ")
        if sep and not line[0].isspace():
            fields.setdefault(key, []).append(value.strip())
    return fields


def foreign_core(find: Callable[[str], Any] | None = None) -> str | None:
    """Why the installed ``tgcore`` is not ours, or None when it is ours or none is installed.

    ``find(name)`` returns a distribution (an ``importlib_metadata.Distribution``) or None (default: the
    installed one).
    """
    dist = (find or _installed)("tgcore")
    if dist is None:
        return None
    fields = _headers(dist)
    if MARKER in fields.get("Classifier", []):
        return None
    version, summary = fields.get("Version", ["?"])[0], fields.get("Summary", ["no summary"])[0]
    where = f" at {dist.locate_file('')}" if hasattr(dist, "locate_file") else ""
    return (f"the installed 'tgcore' is not this project's: tgcore {version} ({summary!r}){where} "
            f"lacks our classifier {MARKER!r} (an unrelated tgcore is on PyPI). Fix: pip uninstall tgcore, "
            f"then {install_command('tgcore')} {IN_A_CLONE}")
