"""Which published distribution provides which device, variant, app, loader or command.

Data only: used to turn "unknown device AMD" into "pip install tg-amd". Keys are
``kind:NAME`` with kind one of device, variant (``DEVICE:VARIANT``), app, loader (a file
suffix), command and transport.
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
    "transport:mpi": "tg-mlx-rdma",
    "transport:mlx5": "tg-mlx-rdma",
}


def provider_of(kind: str, name: str) -> str | None:
    """The pip distribution that provides ``name`` of ``kind``, or None when we publish none."""
    return PROVIDERS.get(f"{kind}:{name}")


def install_hint(kind: str, name: str) -> str:
    """A sentence telling the user how to get ``name``, or '' when no published plugin has it."""
    dist = provider_of(kind, name)
    return f"{name} is provided by the {dist} plugin: pip install {dist}" if dist else ""
