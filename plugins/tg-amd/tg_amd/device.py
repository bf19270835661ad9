"""The ``AMD:EMU`` device: ordinary kernels in the core's PYTHON interpreter, AMD machine code in the emulator.

In: kernels from the scheduler. An ordinary kernel (a SINK in REDUCE form) is pickled by the PYTHON
renderer and interpreted; a custom kernel (``tgcore.custom.custom_program`` whose INS uops carry
``AmdIns``, optionally led by one ``AmdKernel`` with its LDS size and workgroup-id enables) is rendered
to an AMDHSA code object (``tg_amd.codeobj``: the ELF the ROCm loader would take), which the program
loader reads back and runs in ``tg_amd.emulator`` with the launch state its kernel descriptor asks for
and the launch dimensions the engine binds. Out: buffers in host memory (the CPU allocator), written in
place.

Device strings: ``AMD:EMU`` (renderer ``EMU`` of device ``AMD``). Plain ``AMD`` would be the hardware,
which tg-amd does not drive: it fails with "unavailable: no /dev/kfd" (or "not implemented" on a machine
that has one), and ``tg devices`` lists its renderer ``HW`` as unavailable for that reason.
``AMD_ARCH`` (default gfx1200) picks the arch the device's own kernels (``tg_amd.asm_gemm``) target.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from tgcore.custom import is_custom_program
from tgcore.renderer.python import PythonRenderer
from tgcore.runtime.cpu import CPUAllocator
from tgcore.runtime.device import Device
from tgcore.runtime.python import PythonProgram
from tgcore.runtime.registry import DeviceError
from tgcore.uop import UOp

ELF_MAGIC = b"\x7fELF"
EMU_ARCHS = ("gfx1200", "gfx1201", "gfx1100")
MAX_LDS = 65536


@dataclass(frozen=True)
class AmdIns:
    """One encoded instruction: the ``arg`` of an INS uop in an AMD custom kernel."""
    arch: str
    code: bytes
    text: str = ""

    def __str__(self) -> str:
        return self.text or self.code.hex()


@dataclass(frozen=True)
class AmdKernel:
    """Launch facts of an AMD custom kernel, given as its first INS arg (it encodes to no bytes).

    Without one, a kernel gets all of LDS (64 KiB) and all three workgroup ids."""
    lds_bytes: int = MAX_LDS
    workgroup_id: tuple[bool, bool, bool] = (True, True, True)


def kfd_missing() -> str | None:
    """Why the AMD hardware cannot be used here (always a reason: tg-amd has no hardware runtime)."""
    if not os.path.exists("/dev/kfd"):
        return "no /dev/kfd"
    return "the hardware runtime is not implemented in tg-amd (use AMD:EMU)"


def render_custom(name: str, sink: UOp) -> bytes:
    """A custom program of ``AmdIns`` (after an optional ``AmdKernel``) -> an AMDHSA code object."""
    from tg_amd.codeobj import code_object
    args = [u.arg for u in sink.src]
    info = args[0] if args and isinstance(args[0], AmdKernel) else AmdKernel()
    insts = args[1:] if args and isinstance(args[0], AmdKernel) else args
    bad = [type(i).__name__ for i in insts if not isinstance(i, AmdIns)]
    if bad or not insts:
        raise TypeError(f"AMD:EMU custom kernel {name!r}: INS args must be tg_amd.device.AmdIns (after an optional "
                        f"AmdKernel), got {bad[0] if bad else 'none'}")
    archs = {i.arch for i in insts}
    if len(archs) != 1:
        raise ValueError(f"AMD:EMU custom kernel {name!r} mixes archs {sorted(archs)}")
    arch = archs.pop()
    if arch not in EMU_ARCHS:
        raise ValueError(f"AMD:EMU runs {', '.join(EMU_ARCHS)} code, kernel {name!r} is for {arch}")
    launch = sink.arg
    threads = launch.local_size[0] * launch.local_size[1] * launch.local_size[2]
    return code_object(name, b"".join(i.code for i in insts), arch,
                       kernargs=[f"arg{i}" for i in range(launch.n_args)], lds_size=info.lds_bytes,
                       workgroup_id=info.workgroup_id, max_workgroup_size=min(threads, 1024))


class EmuRenderer(PythonRenderer):
    """PYTHON's renderer for ordinary kernels; machine code for custom kernels."""
    device = "AMD"
    name = "EMU"
    custom_kernels = True

    def render(self, name: str, kernel: list[UOp] | UOp) -> bytes:
        if isinstance(kernel, UOp) and is_custom_program(kernel):
            return render_custom(name, kernel)
        return super().render(name, kernel)


class EmuCounterTotals:
    """The emulator's exact counts over every kernel it ran in this process, as a profile reads counters
    (``read()``: name -> count so far; nothing is refused). See ``tg_amd.emu_counters``."""

    totals: dict[str, int] = {}
    refused: dict[str, str] = {}

    def read(self) -> dict[str, int]:
        return dict(EmuCounterTotals.totals)


def record_run(stats: Any) -> None:
    """Add one launch's ``RunStats`` to the totals a profile reads."""
    totals = EmuCounterTotals.totals
    figures = {"instructions": stats.instructions, "lds-bank-conflicts": stats.lds_bank_conflicts,
               "waits": stats.waits, "waits-that-waited": stats.waits_that_waited,
               **{"instructions-" + name.lower().replace(" ", "-"): n for name, n in stats.by_class.items()}}
    for name, n in figures.items():
        totals[name] = totals.get(name, 0) + int(n)


class EmuProgram:
    """``EmuProgram(name, lib)``: an interpreted kernel (a pickled SINK), or a code object for the emulator."""

    def __init__(self, name: str, lib: bytes):
        from tg_amd.emulator import load_code_object
        self.name = name
        self.interpreted: PythonProgram | None = None
        self.last_stats: Any = None
        if lib.startswith(ELF_MAGIC):
            self.machine, self.launch = load_code_object(bytes(lib), name)
            self.arch = self.machine.arch.name
        else:
            self.interpreted = PythonProgram(name, lib)

    def __call__(self, *bufs: Any, vals: tuple[int, ...] = (), threads: int = 1, wait: bool = False,
                 global_size: tuple[int, ...] | None = None, local_size: tuple[int, ...] | None = None) -> float | None:
        if self.interpreted is not None:
            return self.interpreted(*bufs, vals=vals, threads=threads, wait=wait)
        if global_size is None or local_size is None:
            raise ValueError(f"AMD:EMU kernel {self.name!r} needs global_size and local_size")
        start = time.perf_counter()
        self.last_stats = self.machine.run(list(bufs), tuple(global_size), tuple(local_size), self.launch)
        record_run(self.last_stats)
        return time.perf_counter() - start if wait else None

    def __repr__(self) -> str:
        return f"<EmuProgram {self.name} {'interpreted' if self.interpreted else self.arch}>"


class AmdEmuDevice(Device):
    """Host memory, the PYTHON interpreter for ordinary kernels, the emulator for AMD machine code."""

    def __init__(self, name: str = "AMD:EMU", variant: str | None = None):
        if name.upper() == "AMD" and variant is None:
            raise DeviceError(f"device AMD (hardware) is unavailable here: {kfd_missing()}; "
                              "AMD:EMU runs AMD kernels in the emulator")
        super().__init__(name, variant, allocator=CPUAllocator(), program=EmuProgram)
        self.threads = 1
        self.arch = os.environ.get("AMD_ARCH", "gfx1200")
        if self.arch not in EMU_ARCHS:
            raise DeviceError(f"AMD_ARCH={self.arch!r}: the emulator runs {', '.join(EMU_ARCHS)}")

    def profile_counters(self) -> EmuCounterTotals:
        """The emulator's exact counts (instructions by class, LDS bank conflicts, waits) for ``PROFILE=1``."""
        return EmuCounterTotals()


def hardware_renderer() -> Any:
    raise DeviceError(f"AMD hardware renderer unavailable: {kfd_missing()}")
