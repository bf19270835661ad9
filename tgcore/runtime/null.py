"""The NULL device: allocates nothing, runs nothing.

In: the same calls as any device. Out: placeholder handles, programs that return at
once. Used by scheduler tests and to measure the engine's own overhead.
Copies are no-ops: copyout leaves the destination as it was.
"""

from __future__ import annotations

from typing import Any

from tgcore.runtime.allocator import Allocator
from tgcore.runtime.compiler import Compiler
from tgcore.runtime.device import Device


class NullHandle:
    """Stands for a buffer of `nbytes` that does not exist."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return f"<NullHandle {self.nbytes} bytes>"


class NullAllocator(Allocator):
    """Hands out NullHandles; holds no memory, so nothing is cached or counted in mem_used."""

    def __init__(self) -> None:
        super().__init__(lru=False, counts_memory=False)

    def _alloc(self, nbytes: int, options: Any) -> NullHandle:
        return NullHandle(nbytes)

    def copyin(self, dest: Any, src: memoryview) -> None:
        pass

    def copyout(self, dest: memoryview, src: Any) -> None:
        pass

    def offset(self, handle: Any, nbytes: int, offset: int) -> NullHandle:
        return NullHandle(nbytes)


class NullProgram:
    """A program that does nothing; calls take the same arguments as CPUProgram's."""

    def __init__(self, name: str, lib: bytes):
        self.name = name
        self.lib = lib

    def __call__(self, *bufs: Any, vals: tuple[int, ...] = (), threads: int = 1, wait: bool = False) -> float | None:
        return 0.0 if wait else None


class NullCompiler(Compiler):
    """Compiles nothing: returns the source bytes, uncached."""

    def compile(self, src: str) -> bytes:
        return src.encode()


class NullDevice(Device):
    def __init__(self, name: str = "NULL", variant: str | None = None):
        super().__init__(name, variant, allocator=NullAllocator(), program=NullProgram)


def NullRenderer() -> Any:
    """The C renderer with a compiler that compiles nothing: kernels are generated, never built."""
    from tgcore.renderer.cstyle import CRenderer
    return CRenderer(NullCompiler())
