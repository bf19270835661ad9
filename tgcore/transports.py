"""``tgcore.transport(name, **options)``: connect to a process group through a plugin's transport.

Transports (MPI, RDMA, ...) are registered by plugins through ``tg_register_transports``.
"""
from __future__ import annotations

from typing import Any

from tgcore.plugins.known import install_hint
from tgcore.plugins.manager import get_host
from tgcore.plugins.registry import unavailable_reason


class TransportError(RuntimeError):
    """An unknown or unavailable transport."""


def transport(name: str, **options: Any) -> Any:
    """Connect this process to its group with transport ``name`` and return the transport object."""
    host = get_host()
    entry = host.registry.transports.get(name)
    if entry is None:
        known = ", ".join(sorted(host.registry.transports)) or "none installed"
        hint = install_hint("transport", name)
        raise TransportError(f"unknown transport {name!r}; available: {known}" + (f". {hint}" if hint else ""))
    reason = unavailable_reason(entry.probe)
    if reason is not None:
        raise TransportError(f"transport {name!r} is unavailable here: {reason}")
    return entry.factory(**options)
