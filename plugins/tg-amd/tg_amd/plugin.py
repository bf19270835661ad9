"""The tgcore plugin ``amd`` (entry point ``amd = "tg_amd.plugin"``).

Registers device ``AMD`` with two renderers: ``EMU`` (``DEV=AMD:EMU``: ordinary kernels interpreted by the
core's PYTHON interpreter, hand-written AMD kernels run by ``tg_amd.emulator``) and ``HW`` (the GPU
itself, unavailable: "no /dev/kfd"; tg-amd has no hardware runtime). Plain ``DEV=AMD`` fails with that
reason instead of silently emulating. Cheap to import: device modules load when a device is opened.
"""
from __future__ import annotations

from typing import Any

import tgcore

TG_HOOKSPEC_VERSION = 1


def make_device(name: str, variant: str | None) -> Any:
    from tg_amd.device import AmdEmuDevice
    return AmdEmuDevice(name, variant)


def make_emu_renderer() -> Any:
    from tg_amd.device import EmuRenderer
    return EmuRenderer()


def make_hw_renderer() -> Any:
    from tg_amd.device import hardware_renderer
    return hardware_renderer()


def hardware_missing() -> str | None:
    from tg_amd.device import kfd_missing
    return kfd_missing()


@tgcore.hookimpl
def tg_register_devices(register: Any) -> None:
    register("AMD", make_device, "AMD GPU: AMD:EMU emulates RDNA3/RDNA4 kernels (ordinary kernels interpreted); "
             "the hardware itself needs /dev/kfd")


@tgcore.hookimpl
def tg_register_renderers(register: Any) -> None:
    register("AMD", "HW", make_hw_renderer, "the GPU through /dev/kfd (not implemented)", probe=hardware_missing)
    register("AMD", "EMU", make_emu_renderer, "PYTHON interpreter + instruction-level RDNA3/RDNA4 emulator")
