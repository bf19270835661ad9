"""Hatch metadata hook for the plugins: one version for every distribution of this repository.

In: the plugin's ``[tool.hatch.metadata.hooks.custom]`` table (``dependencies``, written bare for our own
distributions) and ``tgcore/__init__.py``'s ``__version__`` (the one place the version is set).
Out: the plugin's ``version`` (that version) and ``dependencies``, where each of our distributions
(``tgcore``, ``tg-*`` from plugins/) is pinned to exactly that version: ``tgcore`` -> ``tgcore==0.1.0``.
The pin matters: an unrelated ``tgcore`` (1.0.x) is on PyPI and a bare ``tgcore`` would resolve to it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

REPOSITORY = Path(__file__).resolve().parent
VERSION_FILE = REPOSITORY / "tgcore" / "__init__.py"


def repository_version() -> str:
    match = re.search(r'^__version__ = "([^"]+)"$', VERSION_FILE.read_text(encoding="utf-8"), re.M)
    if match is None:
        raise ValueError(f"no __version__ = \"...\" line in {VERSION_FILE}")
    return match.group(1)


def our_distributions() -> set[str]:
    return {"tgcore"} | {p.parent.name for p in (REPOSITORY / "plugins").glob("*/pyproject.toml")}


def pinned(requirement: str, ours: set[str], version: str) -> str:
    """``requirement`` with an exact pin when it names one of ``ours`` (written bare, extras allowed)."""
    match = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", requirement)
    if match is None or re.sub(r"[-_.]+", "-", match.group(1)).lower() not in ours:
        return requirement
    name, extras, rest = match.groups()
    if rest:
        raise ValueError(f"write our own distributions bare, the hook pins them to {version}: {requirement!r}")
    return f"{name}{extras or ''}=={version}"


class LockstepHook(MetadataHookInterface):
    def update(self, metadata: dict[str, Any]) -> None:
        version = repository_version()
        ours = our_distributions()
        metadata["version"] = version
        metadata["dependencies"] = [pinned(r, ours, version) for r in self.config.get("dependencies", [])]
