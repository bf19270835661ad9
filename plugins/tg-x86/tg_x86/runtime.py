"""Run machine code in this process.

In: code bytes (position independent: the assembler emits only relative jumps).
Out: ``ExecutableCode``, which owns an executable mapping holding the code, and ctypes
function pointers into it (System V AMD64 calling convention: integer and pointer
arguments in rdi, rsi, rdx, rcx, r8, r9; floats in xmm0-7; result in rax or xmm0).

The mapping is never writable and executable at once: it is created anonymous and
read+write, the code is copied in, then ``mprotect`` makes it read+execute. It is unmapped
when the ``ExecutableCode`` is garbage collected; function pointers made by ``function``
keep it alive.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from typing import Any

_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.mprotect.restype = ctypes.c_int
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = libc
    return _libc


class ExecutableCode:
    """Machine code mapped read+execute. ``function(restype, *argtypes)`` gives a callable."""

    def __init__(self, code: bytes) -> None:
        if not code:
            raise ValueError("no code to map")
        libc = _c()
        self.size = -(-len(code) // mmap.PAGESIZE) * mmap.PAGESIZE
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        addr = libc.mmap(None, self.size, _PROT_READ | _PROT_WRITE, flags, -1, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), f"mmap of {self.size} bytes failed: {os.strerror(ctypes.get_errno())}")
        self.address: int = addr
        self._finalizer = weakref.finalize(self, libc.munmap, addr, self.size)
        ctypes.memmove(addr, code, len(code))
        if libc.mprotect(addr, self.size, _PROT_READ | _PROT_EXEC) != 0:
            err = ctypes.get_errno()
            self._finalizer()
            raise OSError(err, f"mprotect(read+execute) failed: {os.strerror(err)}")
        self.code = bytes(code)

    def function(self, restype: Any, *argtypes: Any, offset: int = 0) -> Any:
        """A ctypes function pointer to ``offset`` in the code; it keeps this mapping alive."""
        if not 0 <= offset < len(self.code):
            raise ValueError(f"offset {offset} is outside the {len(self.code)} bytes of code")
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address + offset)
        fn._tg_code = self  # the pointer must not outlive the mapping
        return fn

    def close(self) -> None:
        self._finalizer()

    def __repr__(self) -> str:
        return f"<ExecutableCode {len(self.code)} bytes at {self.address:#x}>"


def load_function(code: bytes, restype: Any, *argtypes: Any) -> Any:
    """Map ``code`` and return a ctypes callable for its first byte."""
    return ExecutableCode(code).function(restype, *argtypes)
