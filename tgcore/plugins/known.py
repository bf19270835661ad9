"""Which published distribution provides which device, variant, app, loader or command.

Data only: used to turn "unknown device AMD" into "pip install tg-amd". Keys are
``kind:NAME`` with kind one of device, variant (``DEVICE:VARIANT``), app, loader (a file
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


def provider_of(kind: str, name: str) -> str | None:
    """The pip distribution that provides ``name`` of ``kind``, or None when we publish none."""
    return PROVIDERS.get(f"{kind}:{name}")


def install_hint(kind: str, name: str) -> str:
    """A sentence telling the user how to get ``name``, or '' when no published plugin has it."""
    dist = provider_of(kind, name)
    if dist:
        return f"{name} is provided by the {dist} plugin: pip install {dist}"
    dist = PROVIDERS.get(f"{kind}:*")
    return f"{kind}s come from plugins such as {dist}: pip install {dist}" if dist else ""
