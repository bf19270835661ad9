"""An instruction-level emulator of RDNA3 (gfx1100) and RDNA4 (gfx1200/gfx1201) compute kernels, wave32.

In: machine code (bytes, decoded with ``tg_amd.decoder``: the emulator runs what the encoder produced, not
the DSL objects), the arch, the kernel's buffers (numpy arrays or allocator handles), the grid (number of
workgroups per dimension) and the workgroup size. Out: the buffers, written in place, and ``RunStats``
(instructions executed per mnemonic, waves, workgroups).

Launch state, as the hardware sets it up (``Launch``; by default: the kernarg pointer as the only user
SGPRs, all three workgroup ids enabled; ``load_code_object`` reads it from a kernel descriptor instead):
- ``s[0:1]``: the kernarg segment: the buffers' addresses in argument order, 8 bytes each.
- workgroup ids: RDNA4: ``ttmp9`` = x, ``ttmp7`` = y | z << 16; RDNA3: the enabled ones of x, y, z in
  the SGPRs right after the user SGPRs (``s2, s3, s4`` by default).
- ``v0``: the thread id within the workgroup, packed: x | y << 10 | z << 20.
- ``EXEC``: the wave's live lanes (a partial last wave has the rest off). Other registers start as a
  poison pattern (NaN as f32/f16), so a kernel that reads an uninitialised register goes visibly wrong.
Global memory: buffer i lives at ``GlobalMemory.BASE + i * 2**36``; an access outside every buffer
raises ``EmulatorError``. LDS: ``Launch.lds_bytes`` per workgroup (default 64 KiB; a code object's
group segment size), zeroed.

How: the program is decoded and compiled once (``tg_amd.emu_ops``) into one closure per instruction.
Workgroups run one after another; the waves of a workgroup run round-robin, each until it blocks at a
barrier or ends, so ``s_barrier`` (RDNA3) and ``s_barrier_signal``/``s_barrier_wait`` (RDNA4) synchronise
them. Memory operations complete at the ``s_wait*``/``s_waitcnt`` that covers them (see ``emu_state``).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from tg_amd.arch import Arch, AsmError, get_arch
from tg_amd.assembler import decode_all
from tg_amd.emu_counters import LDS_MODELS, EmuCounts, instruction_classes
from tg_amd.emu_ops import BLOCK, END, Context, compile_inst
from tg_amd.emu_state import EXEC, FULL, TTMP, WAVE, EmulatorError, GlobalMemory, Wave, Workgroup
from tg_amd.inst import Inst

__all__ = ["EmulatorError", "Launch", "Program", "RunStats", "load_code_object", "run_code_object", "run_kernel",
           "LDS_BYTES", "MAX_INSTRUCTIONS"]

LDS_BYTES = 64 * 1024
MAX_INSTRUCTIONS = 200_000_000  # per launch: a kernel that loops forever fails instead of hanging
COUNTERS = {12: ("load", "ds", "km"), 11: ("vm", "lgkm")}


@dataclass(frozen=True)
class Launch:
    """What the hardware puts in registers at wave start, and the LDS a workgroup gets."""
    user_sgprs: int = 2                                      # the kernarg pointer, s[0:1]
    workgroup_id: tuple[bool, bool, bool] = (True, True, True)
    lds_bytes: int = LDS_BYTES


@dataclass
class RunStats:
    """What one launch executed."""
    instructions: int = 0
    by_name: Counter[str] = field(default_factory=Counter)
    waves: int = 0
    workgroups: int = 0
    seconds: float = 0.0       # wall clock
    cpu_seconds: float = 0.0   # this process's CPU time (steadier on a shared machine)
    # exact counts (tg_amd.emu_counters): instructions by class, LDS accesses and their bank conflicts under the
    # stated model, wait instructions executed and how many of them had operations to complete first
    by_class: Counter[str] = field(default_factory=Counter)
    lds_accesses: int = 0
    lds_bank_conflicts: int = 0
    waits: int = 0
    waits_that_waited: int = 0


class _MemoryBox:
    """The global memory of the current launch (instructions are compiled once, memory changes per launch)."""

    def __init__(self) -> None:
        self.memory: GlobalMemory | None = None

    def read(self, addrs: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        assert self.memory is not None
        return self.memory.read(addrs, nbytes, what)

    def write(self, addrs: np.ndarray, data: np.ndarray, what: str) -> None:
        assert self.memory is not None
        self.memory.write(addrs, data, what)


class Program:
    """Decoded and compiled machine code for one arch."""

    def __init__(self, code: bytes, arch: str | Arch):
        self.arch = get_arch(arch)
        if self.arch.family not in ("rdna3", "rdna4"):
            raise EmulatorError(f"the emulator runs RDNA3/RDNA4 wave32 code, not {self.arch.name}")
        try:
            decoded = decode_all(bytes(code), self.arch)
        except AsmError as e:
            raise EmulatorError(f"cannot decode the kernel: {e}") from None
        self.insts: list[Inst] = [inst for _, inst in decoded]
        self.positions = [pos for pos, _ in decoded]
        self.names = [inst.name + (f" :: {inst.dual.name}" if inst.dual else "") for inst in self.insts]
        index_of = {pos: i for i, pos in enumerate(self.positions)}
        self.memory = _MemoryBox()
        self.counts = EmuCounts(LDS_MODELS[self.arch.family])
        self.lock = threading.Lock()   # one launch at a time: the compiled ops share the memory box and counts
        self.ops = [self._compile(inst, Context(self.arch, pos, index_of, self.memory, self.counts))
                    for pos, inst in decoded]

    @staticmethod
    def _compile(inst: Inst, ctx: Context) -> Any:
        """The instruction's closure; operands the emulator cannot handle give an op that raises when reached."""
        try:
            return compile_inst(inst, ctx)
        except EmulatorError as e:
            message = str(e) if str(e).startswith(inst.name) else str(ctx.fail(inst, str(e)))

            def refuse(w: Wave) -> None:
                raise EmulatorError(message)
            refuse.unsupported = message  # type: ignore[attr-defined]
            return refuse

    @property
    def unsupported(self) -> list[str]:
        """Errors for the instructions the emulator cannot execute (raised only if reached)."""
        return [op.unsupported for op in self.ops if hasattr(op, "unsupported")]

    def run(self, buffers: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...],
            launch: Launch = Launch()) -> RunStats:
        """Launch the kernel over ``global_size`` workgroups of ``local_size`` threads (see module docstring)."""
        with self.lock:
            return self._run(buffers, global_size, local_size, launch)

    def _run(self, buffers: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...],
             launch: Launch) -> RunStats:
        grid, block = _dims(global_size, "global_size"), _dims(local_size, "local_size")
        threads = block[0] * block[1] * block[2]
        if threads > 1024:
            raise EmulatorError(f"workgroup of {threads} threads; at most 1024")
        memory = GlobalMemory(list(buffers))
        kernarg = np.array([memory.address(i) for i in range(len(buffers))] or [0], dtype="<u8")
        kernarg_addr = memory.add(kernarg)
        self.memory.memory = memory
        self.counts.reset()
        stats = RunStats()
        hits = [0] * len(self.ops)
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            with np.errstate(all="ignore"):
                for gz in range(grid[2]):
                    for gy in range(grid[1]):
                        for gx in range(grid[0]):
                            group = self._workgroup((gx, gy, gz), block, kernarg_addr, launch)
                            stats.waves += len(group.waves)
                            stats.workgroups += 1
                            self._run_group(group, hits, stats)
        finally:
            self.memory.memory = None
        stats.seconds = time.perf_counter() - start
        stats.cpu_seconds = time.process_time() - cpu_start
        for i, n in enumerate(hits):
            if n:
                stats.by_name[self.names[i]] += n
        stats.instructions = sum(hits)
        stats.by_class = instruction_classes(stats.by_name)
        counts = self.counts
        stats.lds_accesses, stats.lds_bank_conflicts = counts.lds_accesses, counts.lds_bank_conflicts
        stats.waits, stats.waits_that_waited = counts.waits, counts.waits_that_waited
        return stats

    def run_wave(self, vgprs: dict[int, Any] | None = None, sgprs: dict[int, int] | None = None,
                 exec_mask: int = FULL, buffers: tuple[Any, ...] = (), waves: int = 1) -> list[Wave]:
        """Run one workgroup of ``waves`` waves from a chosen register state (tests, benchmarks).

        ``vgprs`` maps a VGPR number to 32 lane values (uint32 bits), ``sgprs`` a scalar operand code to a
        value; they are applied after the launch state (kernarg pointer, ids, v0). Returns the waves.
        """
        with self.lock:
            return self._run_from_state(vgprs, sgprs, exec_mask, buffers, waves)

    def _run_from_state(self, vgprs: dict[int, Any] | None, sgprs: dict[int, int] | None, exec_mask: int,
                  buffers: tuple[Any, ...], waves: int) -> list[Wave]:
        memory = GlobalMemory(list(buffers))
        kernarg = np.array([memory.address(i) for i in range(len(buffers))] or [0], dtype="<u8")
        kernarg_addr = memory.add(kernarg)
        self.memory.memory = memory
        stats = RunStats()
        try:
            group = self._workgroup((0, 0, 0), (WAVE * waves, 1, 1), kernarg_addr, Launch())
            for w in group.waves:
                w.s[EXEC] = exec_mask
                for reg, values in (vgprs or {}).items():
                    w.v[reg] = np.asarray(values).astype(np.uint32)
                for code, value in (sgprs or {}).items():
                    w.s[code] = value & 0xFFFFFFFF
            with np.errstate(all="ignore"):
                self._run_group(group, [0] * len(self.ops), stats)
        finally:
            self.memory.memory = None
        return group.waves

    def _workgroup(self, gid: tuple[int, int, int], block: tuple[int, int, int], kernarg: int,
                   launch: Launch) -> Workgroup:
        group = Workgroup(gid, launch.lds_bytes)
        id_sgprs = [g for g, on in zip(gid, launch.workgroup_id, strict=True) if on]
        threads = block[0] * block[1] * block[2]
        tid = np.arange(-(-threads // WAVE) * WAVE)
        packed = (tid % block[0]) | (tid // block[0] % block[1]) << 10 | (tid // (block[0] * block[1])) << 20
        for wi in range(len(tid) // WAVE):
            w = Wave(wi, group, COUNTERS[self.arch.gen])
            live = min(WAVE, threads - wi * WAVE)
            w.s[EXEC] = FULL if live == WAVE else (1 << live) - 1
            w.s[0], w.s[1] = kernarg & 0xFFFFFFFF, kernarg >> 32
            if self.arch.gen == 12:
                w.s[TTMP + 9] = gid[0]
                w.s[TTMP + 7] = gid[1] & 0xFFFF | (gid[2] & 0xFFFF) << 16
            else:
                for i, value in enumerate(id_sgprs):
                    w.s[launch.user_sgprs + i] = value
            w.v[0] = packed[wi * WAVE:(wi + 1) * WAVE].astype(np.uint32)
            group.waves.append(w)
        return group

    def _run_group(self, group: Workgroup, hits: list[int], stats: RunStats) -> None:
        live = list(group.waves)
        while live:
            progressed = False
            for w in live:
                progressed |= self._step_wave(w, hits, stats)
            live = [w for w in live if not w.done]
            if live and not progressed:
                where = ", ".join(f"wave {w.index} at byte {self.positions[w.pc]}" for w in live)
                raise EmulatorError(f"deadlock in workgroup {group.gid}: every live wave waits at a barrier ({where})")

    def _step_wave(self, w: Wave, hits: list[int], stats: RunStats) -> bool:
        """Run ``w`` until it blocks or ends; True if it executed anything."""
        ops, pc, n = self.ops, w.pc, 0
        end = len(ops)
        budget = MAX_INSTRUCTIONS - stats.instructions
        try:
            while True:
                if pc >= end:
                    raise EmulatorError(f"wave {w.index} ran past the end of the program (no s_endpgm)")
                r = ops[pc](w)
                if r is None:
                    hits[pc] += 1
                    pc += 1
                elif r >= 0:
                    hits[pc] += 1
                    pc = r
                elif r == BLOCK:
                    break
                else:
                    assert r == END
                    hits[pc] += 1
                    w.done = True
                    n += 1
                    break
                n += 1
                if n > budget:
                    raise EmulatorError(f"more than {MAX_INSTRUCTIONS} instructions executed: runaway loop? "
                                        f"(wave {w.index}, byte {self.positions[pc]})")
        finally:
            w.pc = pc
            stats.instructions += n
        return n > 0


def _dims(size: tuple[int, ...], what: str) -> tuple[int, int, int]:
    dims = tuple(int(x) for x in size) + (1,) * (3 - len(size))
    if len(dims) != 3 or any(d < 1 for d in dims):
        raise EmulatorError(f"{what} must be 1 to 3 positive ints, got {size!r}")
    return dims[0], dims[1], dims[2]


@lru_cache(maxsize=64)
def program(code: bytes, arch: str) -> Program:
    """The compiled program for ``code`` (cached)."""
    return Program(code, arch)


def run_kernel(code: bytes, arch: str | Arch, buffers: list[Any], global_size: tuple[int, ...],
               local_size: tuple[int, ...], launch: Launch = Launch()) -> RunStats:
    """Run machine code on ``buffers`` (written in place): see the module docstring."""
    return program(bytes(code), get_arch(arch).name).run(buffers, global_size, local_size, launch)


def load_code_object(data: bytes, name: str | None = None) -> tuple[Program, Launch]:
    """The program and launch state of kernel ``name`` (default: the only one) in an AMDHSA code object.

    The descriptor decides the user SGPRs (only the kernarg pointer is supported), which workgroup ids
    the hardware writes, wave32, and the LDS size; the code is the bytes at the descriptor's entry.
    """
    from tg_amd.codeobj import read_code_object
    try:
        info = read_code_object(bytes(data))
    except ValueError as e:
        raise EmulatorError(f"cannot load the code object: {e}") from None
    kernels = info["kernels"]
    if name is None and len(kernels) != 1:
        raise EmulatorError(f"the code object has kernels {sorted(kernels)}; name one")
    kernel = kernels.get(name) if name is not None else next(iter(kernels.values()))
    if kernel is None:
        raise EmulatorError(f"no kernel {name!r} in the code object (it has {sorted(kernels)})")
    desc = kernel["descriptor"]
    props, rsrc2 = desc["properties"], desc["rsrc2"]
    unsupported = [key for key in ("enable_sgpr_dispatch_ptr", "enable_sgpr_queue_ptr", "enable_sgpr_dispatch_id",
                                   "enable_sgpr_private_segment_buffer", "enable_sgpr_flat_scratch_init")
                   if props.get(key)] + (["enable_private_segment"] if rsrc2.get("enable_private_segment") else [])
    if unsupported:
        raise EmulatorError(f"kernel descriptor enables {', '.join(unsupported)}: the emulator only provides "
                            "the kernarg pointer and workgroup ids")
    if not props["enable_wavefront_size32"]:
        raise EmulatorError("the kernel is wave64; the emulator runs wave32")
    users = rsrc2["user_sgpr_count"]
    if props["enable_sgpr_kernarg_segment_ptr"] != 1 or users < 2:
        raise EmulatorError(f"kernel descriptor: kernarg pointer {props['enable_sgpr_kernarg_segment_ptr']}, "
                            f"{users} user SGPRs; the emulator needs the kernarg pointer in s[0:1]")
    launch = Launch(users, (bool(rsrc2["enable_sgpr_workgroup_id_x"]), bool(rsrc2["enable_sgpr_workgroup_id_y"]),
                            bool(rsrc2["enable_sgpr_workgroup_id_z"])), desc["group_segment_fixed_size"])
    return program(bytes(kernel["code"]), info["arch"]), launch


def run_code_object(data: bytes, buffers: list[Any], global_size: tuple[int, ...], local_size: tuple[int, ...],
                    name: str | None = None) -> RunStats:
    """Run a kernel of an AMDHSA code object on ``buffers`` (its arguments, 8-byte pointers in order)."""
    prog, launch = load_code_object(data, name)
    return prog.run(buffers, global_size, local_size, launch)
