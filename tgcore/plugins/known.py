"""Which of our distributions provides which device, variant, app, loader or command, and how to install it.

Data only: used to turn "unknown device AMD" into "pip install -e plugins/tg-amd". None of our names
is on PyPI (an unrelated ``tgcore`` is), so the command installs from a clone of this repository.
Keys are ``kind:NAME`` with kind one of device, variant (``DEVICE:VARIANT``), app, loader (a file
suffix), command and transport. ``kind:*`` names the distribution to suggest for any unknown name of
that kind (transports: which ones a plugin offers is the plugin's business, not core's).
"""
from __future__ import annotations

PROVIDERS: dict[str, str] = {
    "variant:CPU:X86": "tg-x86",
    "device:AMD": "tg-amd",
    "variant:AMD:EMU": "tg-amd",
    "loader:.gguf": "tg-gguf",
    "command:gguf": "tg-gguf",
    "app:llm": "tg-llm",
    "command:llm": "tg-llm",
    "transport:*": "tg-mlx-rdma",
}
IN_A_CLONE = "(in a clone of the tgcore repository; not on PyPI)"


def provider_of(kind: str, name: str) -> str | None:
    """The distribution of ours that provides ``name`` of ``kind``, or None when we publish none."""
    return PROVIDERS.get(f"{kind}:{name}")


def install_command(distribution: str) -> str:
    """How to install one of our distributions: from a clone of this repository (not on PyPI)."""
    folder = "." if distribution == "tgcore" else f"plugins/{distribution}"
    return f"pip install -e {folder}"


def install_hint(kind: str, name: str) -> str:
    """A sentence telling the user how to get ``name``, or '' when no plugin of ours has it."""
    dist = provider_of(kind, name)
    if dist:
        return f"{name} is provided by the {dist} plugin: {install_command(dist)} {IN_A_CLONE}"
    dist = PROVIDERS.get(f"{kind}:*")
    return f"{kind}s come from plugins such as {dist}: {install_command(dist)} {IN_A_CLONE}" if dist else ""
