"""The tgcore plugin ``amd`` (entry point ``amd = "tg_amd.plugin"``).

Nothing is registered yet: the assembler is a library (``tg_amd.assemble``). The ``AMD:EMU``
device arrives with the emulator; a device that cannot run is not registered.
"""
from __future__ import annotations

TG_HOOKSPEC_VERSION = 1
