"""State the emulator's instructions act on: a wave's registers, a workgroup's LDS, global memory.

In: buffers (numpy arrays or allocator handles) and launch geometry. Out: ``Wave`` (per-lane VGPRs as a
``(256, 32)`` uint32 array, SGPRs as Python ints indexed by their operand code, SCC, the queues of memory
operations still in flight), ``GlobalMemory`` (host buffers behind fake 64-bit addresses) and ``Lds``.

How: scalar operand codes index ``Wave.s`` directly (0..105 SGPRs, 106/107 VCC, 108..123 TTMP, 124 NULL,
125 M0, 126/127 EXEC), so a decoded scalar operand is one list index. Lane masks (EXEC, VCC, compare
results) are ints; ``lanes(mask)`` turns one into a bool array (cached). Memory operations complete when
the wave waits on their counter (``s_wait_*``/``s_waitcnt``): a load's registers change only then, and an
LDS store becomes visible only then, so a kernel that forgets a wait reads stale data in the emulator too.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

WAVE = 32
FULL = (1 << WAVE) - 1
NUM_VGPRS = 256
POISON = 0x7FFF7FFF  # uninitialised registers: NaN as f32 and as both f16 halves, a huge int
VCC, NULL, M0, EXEC = 106, 124, 125, 126
TTMP = 108


class EmulatorError(RuntimeError):
    """A kernel the emulator cannot run: unsupported instruction, bad address, deadlock, runaway loop."""


@lru_cache(maxsize=4096)
def lanes(mask: int) -> np.ndarray:
    """The lanes set in a 32-bit lane mask, as a read-only bool array of 32."""
    out = np.unpackbits(np.array([mask & FULL], dtype="<u4").view(np.uint8), bitorder="little").astype(bool)
    out.flags.writeable = False
    return out


def mask_of(active: np.ndarray) -> int:
    """A bool array of 32 lanes -> the lane mask int."""
    return int(np.packbits(active, bitorder="little").view("<u4")[0])


class Wave:
    """One wave32: registers, program counter, in-flight memory operations and barrier progress."""

    __slots__ = ("v", "s", "scc", "pc", "queues", "barriers", "in_barrier", "done", "index", "group")

    def __init__(self, index: int, group: Workgroup, counters: tuple[str, ...]):
        self.v = np.full((NUM_VGPRS, WAVE), POISON, dtype=np.uint32)
        self.s = [POISON] * 128
        self.s[NULL] = 0
        self.s[EXEC + 1] = 0
        self.scc = 0
        self.pc = 0
        self.queues: dict[str, deque[Callable[[], None]]] = {c: deque() for c in counters}
        self.barriers = 0        # barriers signalled so far
        self.in_barrier = False  # RDNA3 s_barrier: signalled, now waiting
        self.done = False
        self.index = index
        self.group = group

    @property
    def exec(self) -> int:
        return self.s[EXEC]

    def wait(self, counter: str, allowed: int) -> int:
        """Complete the oldest operations on ``counter`` until at most ``allowed`` are in flight; how many it
        completed (a wait that completed some had to wait)."""
        queue = self.queues[counter]
        completed = 0
        while len(queue) > allowed:
            queue.popleft()()
            completed += 1
        return completed

    def drain(self) -> None:
        for counter in self.queues:
            self.wait(counter, 0)

    def vwrite(self, reg: int, value: Any) -> None:
        """Write a VGPR (uint32 bits, one per lane or one for all) in the lanes EXEC enables."""
        ex = self.s[EXEC]
        if ex == FULL:
            self.v[reg] = value
        elif ex:
            self.v[reg] = np.where(lanes(ex), value, self.v[reg])


class Workgroup:
    """A workgroup: its id, its LDS and its waves."""

    def __init__(self, gid: tuple[int, int, int], lds_bytes: int):
        self.gid = gid
        self.lds_bytes = lds_bytes
        self.lds = np.zeros(-(-lds_bytes // 4) * 4, dtype=np.uint8)   # whole dwords, for the uint32 view
        self.waves: list[Wave] = []


def as_bytes(buf: Any) -> np.ndarray:
    """A writable uint8 view of a numpy array or an allocator handle (anything with the buffer protocol)."""
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise EmulatorError("buffers must be C-contiguous")
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)


ALL = slice(None)


class GlobalMemory:
    """Host buffers at fake 64-bit addresses: buffer i starts at ``BASE + i * STRIDE``."""

    BASE = 0x7F00_0000_0000
    STRIDE = 1 << 36

    def __init__(self, buffers: list[Any]):
        self.regions = [as_bytes(b) for b in buffers]

    def add(self, buf: Any) -> int:
        self.regions.append(as_bytes(buf))
        return self.address(len(self.regions) - 1)

    def address(self, index: int) -> int:
        return self.BASE + index * self.STRIDE

    def _locate(self, addrs: np.ndarray, nbytes: int, what: str) -> list[tuple[np.ndarray, Any, np.ndarray]]:
        """(region bytes, lane positions, byte offsets) per buffer the addresses fall in; checks bounds."""
        lo, hi = int(addrs.min()), int(addrs.max())
        r = (lo - self.BASE) >> 36
        if r == (hi - self.BASE) >> 36 and 0 <= r < len(self.regions):   # one buffer: the usual case
            start = self.address(r)
            if hi - start + nbytes <= len(self.regions[r]):
                return [(self.regions[r], ALL, (addrs - np.uint64(start)).astype(np.int64))]
        rel = addrs.astype(np.uint64) - np.uint64(self.BASE)
        region = (rel >> np.uint64(36)).astype(np.int64)
        out = []
        first, last = int(region.min()), int(region.max())
        groups = [(first, np.arange(len(addrs)))] if first == last else [
            (int(r), np.flatnonzero(region == r)) for r in np.unique(region)]
        for r, where in groups:
            offs = (rel[where] & np.uint64(self.STRIDE - 1)).astype(np.int64)
            if not 0 <= r < len(self.regions) or int(offs.max()) + nbytes > len(self.regions[r]):
                bad = int(addrs[where][0])
                size = len(self.regions[r]) if 0 <= r < len(self.regions) else 0
                raise EmulatorError(f"{what}: address 0x{bad:x} (+{nbytes} bytes) is outside every buffer "
                                    f"(nearest buffer {r} has {size} bytes)")
            out.append((self.regions[r], where, offs))
        return out

    def read(self, addrs: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        """``nbytes`` bytes at each address: a uint8 array (len(addrs), nbytes)."""
        out = np.empty((len(addrs), nbytes), dtype=np.uint8)
        span = np.arange(nbytes)
        for mem, where, offs in self._locate(addrs, nbytes, what):
            out[where] = mem[offs[:, None] + span]
        return out

    def write(self, addrs: np.ndarray, data: np.ndarray, what: str) -> None:
        nbytes = data.shape[1]
        span = np.arange(nbytes)
        for mem, where, offs in self._locate(addrs, nbytes, what):
            mem[offs[:, None] + span] = data[where]


def lds_check(size: int, lo: int, hi: int, nbytes: int, what: str) -> None:
    """Addresses ``lo``..``hi`` (each + ``nbytes``) must lie in the workgroup's ``size`` bytes of LDS."""
    if lo < 0 or hi + nbytes > size:
        bad = lo if lo < 0 else hi
        raise EmulatorError(f"{what}: LDS address {bad} (+{nbytes} bytes) is outside the {size} bytes of LDS")
