"""Run machine code in this process: the core's executable memory (``tgcore.runtime.executable``), re-exported.

``ExecutableCode(code).function(restype, *argtypes)`` gives a ctypes callable for the code (the host's C calling
convention; the renderer compiles for it, see ``abi.py``). The pages are never writable and executable at once.
"""
from __future__ import annotations

from tgcore.runtime.executable import ExecutableCode, PosixPages, WindowsPages, host_pages, load_function

__all__ = ["ExecutableCode", "PosixPages", "WindowsPages", "host_pages", "load_function"]
