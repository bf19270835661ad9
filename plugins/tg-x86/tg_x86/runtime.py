"""Run machine code in this process.

In: code bytes (position independent: the assembler emits only relative jumps).
Out: ``ExecutableCode``, which owns an executable mapping holding the code, and ctypes
function pointers into it (ctypes calls them with the host's C calling convention: System V
AMD64 on Linux and macOS, Windows x64 on Windows).

The mapping is never writable and executable at once: it is created read+write, the code is
copied in, then it is made read+execute (POSIX: anonymous ``mmap`` and ``mprotect`` from libc;
Windows: ``VirtualAlloc`` and ``VirtualProtect`` from kernel32, where ctypes calls with the
Windows x64 convention the renderer then compiles for, see ``abi.py``). It is unmapped when the
``ExecutableCode`` is garbage collected; function pointers made by ``function`` keep it alive.
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
import weakref
from typing import Any

_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MEM_COMMIT, _MEM_RESERVE, _MEM_RELEASE = 0x1000, 0x2000, 0x8000   # Windows VirtualAlloc/VirtualFree
_PAGE_READWRITE, _PAGE_EXECUTE_READ = 0x04, 0x20                    # Windows page protections
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


class PosixPages:
    """Pages from libc: anonymous private ``mmap``, ``mprotect``, ``munmap``."""

    def __init__(self) -> None:
        self.libc = _c()

    def map_rw(self, size: int) -> int:
        addr = self.libc.mmap(None, size, _PROT_READ | _PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {size} bytes failed: {os.strerror(err)}")
        return int(addr)

    def make_rx(self, addr: int, size: int) -> None:
        if self.libc.mprotect(addr, size, _PROT_READ | _PROT_EXEC) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mprotect(read+execute) failed: {os.strerror(err)}")

    def unmap(self, addr: int, size: int) -> None:
        self.libc.munmap(addr, size)


class WindowsPages:
    """Pages from kernel32: ``VirtualAlloc`` read+write, ``VirtualProtect`` to execute+read (then the instruction
    cache is flushed, as Windows asks after writing code), ``VirtualFree``. ``kernel32`` can be given (tests)."""

    def __init__(self, kernel32: Any = None) -> None:
        if kernel32 is None:
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
            kernel32.VirtualAlloc.restype = ctypes.c_void_p
            kernel32.VirtualAlloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint32]
            kernel32.VirtualProtect.restype = ctypes.c_int
            kernel32.VirtualProtect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32,
                                                ctypes.POINTER(ctypes.c_uint32)]
            kernel32.VirtualFree.restype = ctypes.c_int
            kernel32.VirtualFree.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32]
            kernel32.FlushInstructionCache.restype = ctypes.c_int
            kernel32.FlushInstructionCache.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            kernel32.GetCurrentProcess.restype = ctypes.c_void_p
        self.kernel32 = kernel32

    def _error(self, what: str) -> OSError:
        err = ctypes.get_last_error() if hasattr(ctypes, "get_last_error") else 0
        return OSError(err, f"{what} failed (Windows error {err})")

    def map_rw(self, size: int) -> int:
        addr = self.kernel32.VirtualAlloc(None, size, _MEM_COMMIT | _MEM_RESERVE, _PAGE_READWRITE)
        if not addr:
            raise self._error(f"VirtualAlloc of {size} bytes")
        return int(addr)

    def make_rx(self, addr: int, size: int) -> None:
        old = ctypes.c_uint32(0)
        if not self.kernel32.VirtualProtect(addr, size, _PAGE_EXECUTE_READ, ctypes.byref(old)):
            raise self._error("VirtualProtect(execute+read)")
        self.kernel32.FlushInstructionCache(self.kernel32.GetCurrentProcess(), addr, size)

    def unmap(self, addr: int, size: int) -> None:
        self.kernel32.VirtualFree(addr, 0, _MEM_RELEASE)  # MEM_RELEASE frees the whole reservation: size 0


@functools.cache   # one per process: WindowsPages loads kernel32 and declares its functions
def host_pages() -> PosixPages | WindowsPages:
    return WindowsPages() if sys.platform == "win32" else PosixPages()


class ExecutableCode:
    """Machine code mapped read+execute. ``function(restype, *argtypes)`` gives a callable."""

    def __init__(self, code: bytes, pages: PosixPages | WindowsPages | None = None) -> None:
        if not code:
            raise ValueError("no code to map")
        pages = pages or host_pages()
        self.size = -(-len(code) // mmap.PAGESIZE) * mmap.PAGESIZE
        addr = pages.map_rw(self.size)
        self.address: int = addr
        self._finalizer = weakref.finalize(self, pages.unmap, addr, self.size)
        ctypes.memmove(addr, code, len(code))
        try:
            pages.make_rx(addr, self.size)
        except OSError:
            self._finalizer()
            raise
        self.code = bytes(code)

    def function(self, restype: Any, *argtypes: Any, offset: int = 0) -> Any:
        """A ctypes function pointer to ``offset`` in the code; it keeps this mapping alive."""
        if not 0 <= offset < len(self.code):
            raise ValueError(f"offset {offset} is outside the {len(self.code)} bytes of code")
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address + offset)
        fn._tg_code = self  # type: ignore[attr-defined]  # the pointer must not outlive the mapping (ctypes' stubs
        # declare no attributes)
        return fn

    def close(self) -> None:
        self._finalizer()

    def __repr__(self) -> str:
        return f"<ExecutableCode {len(self.code)} bytes at {self.address:#x}>"


def load_function(code: bytes, restype: Any, *argtypes: Any) -> Any:
    """Map ``code`` and return a ctypes callable for its first byte."""
    return ExecutableCode(code).function(restype, *argtypes)
