"""Device base class: a named place that owns an allocator and a program loader.

In: a device name ("CPU", "CPU:X86", "DISK:/path/file") and an optional variant.
Out: an object with `allocator`, `program` (loader class), `renderer` (set by the device
registry after construction) and `compiler` (the renderer's compiler).

Concrete devices live next to this file (cpu.py, null.py, disk.py); plugins add more.
Construction is cheap: nothing is compiled or allocated until used.
"""

from __future__ import annotations

from typing import Any

from tgcore.runtime.allocator import Allocator


class Device:
    """Base device.

    name: full device name as the user spells it ("CPU", "CPU:X86"); if `variant` is
    given and the name does not already end with it, ":variant" is appended.
    allocator: the device's Allocator. program: the class that loads compiled bytes,
    called as `program(name, lib)`. renderer: None until the registry sets it.
    """

    def __init__(self, name: str, variant: str | None = None, *, allocator: Allocator, program: type):
        if variant is not None and name.split(":")[-1].upper() != variant.upper():
            name = f"{name}:{variant}"
        self.name = name
        self.variant = variant
        self.allocator = allocator
        self.program = program
        self.renderer: Any = None

    @property
    def compiler(self) -> Any:
        """The renderer's compiler, or None if no renderer is set (or it has none)."""
        if self.renderer is None:
            return None
        return self.renderer.compiler

    def profile_counters(self) -> Any:
        """The counters a profile reads around each kernel run here: an object with ``read() -> {name: count}``
        and ``refused: {name: why}``; None (the default) when the device has none."""
        return None

    def synchronize(self) -> None:
        """Wait for all queued work on this device. Synchronous devices do nothing."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
