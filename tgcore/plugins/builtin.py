"""Core's own devices and renderers, registered through the same hooks as any plugin.

Factories import their modules only when a device is opened, so loading this plugin costs
nothing.
"""
from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable
from typing import Any

from tgcore.plugins.hookspecs import hookimpl
from tgcore.plugins.known import install_command


def lazy(target: str) -> Callable[..., Any]:
    """A factory that imports ``"package.module:attr"`` on first call and calls it."""
    module_name, _, attr = target.partition(":")

    def factory(*args: Any) -> Any:
        return getattr(importlib.import_module(module_name), attr)(*args)
    factory.__qualname__ = f"lazy({target})"
    return factory


def c_compiler_missing() -> str | None:
    """Probe for the C renderer: None when a C compiler is on PATH (or $CC), else why not."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc.split()[0]) is None:
        return f"no C compiler found ({cc}); install gcc or clang, or the tg-x86 plugin: {install_command('tg-x86')}"
    return None


@hookimpl
def tg_register_devices(register: Any) -> None:
    register("CPU", lazy("tgcore.runtime.cpu:CPUDevice"), "this machine's processor, kernels compiled to native code")
    register("PYTHON", lazy("tgcore.runtime.python:PythonDevice"),
             "reference interpreter of kernels in Python and numpy: slow, exact, needs no compiler")
    register("NULL", lazy("tgcore.runtime.null:NullDevice"),
             "allocates and runs nothing: for scheduler tests and overhead benchmarks")
    register("DISK", lazy("tgcore.runtime.disk:DiskDevice"), "memory-mapped file, DISK:/path/to/file",
             variants="*")


@hookimpl
def tg_register_renderers(register: Any) -> None:
    register("CPU", "C", lazy("tgcore.renderer.cstyle:CRenderer"), "C11 with vector extensions, built by cc",
             probe=c_compiler_missing)
    register("PYTHON", "PY", lazy("tgcore.renderer.python:PythonRenderer"), "linear UOps for the interpreter")
    register("NULL", "C", lazy("tgcore.runtime.null:NullRenderer"), "C source, never compiled")
