"""The tgcore plugin ``x86`` (entry point ``x86 = "tg_x86.plugin"``).

Registers renderer ``X86`` for the CPU device (``DEV=CPU:X86``): tgcore kernels compiled to
our own x86-64 machine code (needs AVX2, FMA and F16C; the probe says why not when missing).
Cheap to import: the renderer and the CPU probe load when first used.
"""
from __future__ import annotations

from typing import Any

import tgcore

TG_HOOKSPEC_VERSION = 1


def unavailable_reason() -> str | None:
    from tg_x86.cpu import unavailable_reason as probe
    return probe()


def make_renderer() -> Any:
    from tg_x86.renderer import X86Renderer
    return X86Renderer()


@tgcore.hookimpl
def tg_register_renderers(register: Any) -> None:
    register("CPU", "X86", make_renderer, "x86-64 machine code from tg-x86 (no C compiler)",
             probe=unavailable_reason)
