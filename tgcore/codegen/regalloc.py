"""Linear-scan register allocation for ISA renderers (generic: no instruction set named here).

In:  a linear list of machine instructions (``MInst``) whose operands may be virtual registers
     (``VReg``), physical registers (``Register``) or anything else the renderer uses (memory
     operands expose the registers they read through a ``regs`` attribute), loops marked by
     ``LoopStart``/``LoopEnd`` pseudo-instructions, and an ``AllocTarget`` describing the
     machine (allocatable and scratch registers per class, two-address instructions, and how
     to build copies, spills and fills). A branch must not write a register: spill code after
     it would not run when the branch is taken.
     ``instruction_registers(program)`` (which registers each instruction reads and writes) may come
     along too, when the renderer looked at them before allocating (e.g. to remove dead code).
Out: the same program on physical registers, with spill and fill code and copies added, and
     the number of stack bytes the spill slots need.

How: live intervals run from a virtual register's first to its last mention; a value live
into a loop (defined before it, used inside) stays live to the loop's back edge. Intervals are
scanned in start order; an interval gets a free register of its class (within its allowed
set); when none is free, the interval ending last is spilled to a stack slot for its whole
life ("spill everywhere": a store after each definition, a fill into a reserved scratch
register before each use). A two-address instruction whose first source dies there gets that
source's register for its result (coalescing), otherwise a copy is inserted before it.
"""
from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import compress
from typing import Any


@dataclass(frozen=True)
class Register:
    name: str
    index: int   # the number the encoder uses
    cls: str     # register class, e.g. "gpr" or "vec"

    def __repr__(self) -> str:
        return self.name


@dataclass(eq=False, slots=True)
class VReg:
    """A virtual register: identity is the object. ``allowed`` pins it to some registers (e.g. rax for idiv).
    Never changed once made (not frozen: a frozen dataclass takes ~4x longer to build, and selection makes
    one per value)."""
    id: int
    cls: str
    allowed: tuple[Register, ...] | None = None

    def __repr__(self) -> str:
        return f"%{self.cls}{self.id}"


@dataclass(slots=True, init=False)
class MInst:
    """One machine instruction: ``defs`` are written, ``uses`` are read (operands may hold registers)."""
    op: Any
    defs: list[Any]
    uses: list[Any]
    arg: Any

    # written out: selection builds one per instruction, and the generated one costs more. The lists are given
    # (``[]`` for none): no default to test for on every call
    def __init__(self, op: Any, defs: list[Any], uses: list[Any], arg: Any = None) -> None:
        self.op = op
        self.defs = defs
        self.uses = uses
        self.arg = arg

    def registers_read(self) -> Iterator[Any]:
        for o in self.uses:
            yield from _regs_in(o)
        for o in self.defs:  # registers inside a memory destination are read, not written
            if not isinstance(o, (VReg, Register)):
                yield from _regs_in(o)

    def registers_written(self) -> Iterator[Any]:
        return (o for o in self.defs if isinstance(o, (VReg, Register)))


@dataclass(slots=True)
class LoopStart:
    label: Any


@dataclass(slots=True)
class LoopEnd:
    label: Any


_REG_TYPES = (VReg, Register)
_START_END = operator.attrgetter("start", "end")
_START, _END = operator.attrgetter("start"), operator.attrgetter("end")
_VREG = operator.attrgetter("vreg")


def _regs_in(operand: Any) -> Iterator[Any]:
    if isinstance(operand, (VReg, Register)):
        yield operand
    else:
        for r in getattr(operand, "regs", ()):
            if isinstance(r, (VReg, Register)):
                yield r


class AllocationError(RuntimeError):
    """The program cannot be allocated (e.g. two pinned values need the same register at once)."""


@dataclass
class AllocTarget:
    registers: dict[str, list[Register]]            # allocatable, in preference order
    scratch: dict[str, list[Register]]              # reserved for fills/spills and copies
    # does defs[0] have to be uses[0]'s register? A predicate, or the name of a boolean attribute of the
    # instruction's ``arg`` (False when it has none): read without a call per instruction
    two_address: Callable[[MInst], bool] | str
    copy: Callable[[Register, Register], MInst]     # dst <- src
    spill: Callable[[Register, int], MInst]         # stack slot at offset <- reg
    fill: Callable[[Register, int], MInst]          # reg <- stack slot at offset
    slot_size: Callable[[str], int]                 # bytes of a spill slot of a register class


@dataclass(eq=False, slots=True)
class Interval:
    """A virtual register's life: first to last mention (loops extended); identity is the object."""
    vreg: VReg
    start: int
    end: int
    reg: Register | None = None
    slot: int | None = None


def instruction_registers(program: list[Any], known: dict[int, tuple[list[Any], list[Any]]] | None = None
                          ) -> list[tuple[list[Any], list[Any]]]:
    """For each instruction: (the registers it reads, each once, in operand order; the registers it writes), virtual
    and physical ones; a memory operand's registers (its ``regs``) are read, also in a destination. Two empty lists
    for a loop marker. A renderer that looks at these before allocating (dead code, peepholes) hands them on to
    ``plan_registers``; nobody changes the lists (the written ones may be the instruction's own ``defs``).
    ``known``: the registers of instructions seen before, by ``id`` (of a similar program's instructions, kept
    alive by the caller); only the others are looked at."""
    if known is None:
        return _registers_of_all(program)
    out = list(map(known.get, map(id, program)))
    missing = list(compress(itertools.count(), map(operator.is_, out, itertools.repeat(None))))
    if missing:
        for i, found in zip(missing, _registers_of_all([program[i] for i in missing]), strict=True):
            out[i] = found
    return out  # type: ignore[return-value]


_NO_REGISTERS: tuple[list[Any], list[Any]] = ([], [])  # loop markers: shared, never changed


def _registers_of_all(program: list[Any]) -> list[tuple[list[Any], list[Any]]]:
    out: list[tuple[list[Any], list[Any]]] = []
    append = out.append
    for ins in program:
        if type(ins) is not MInst:
            append(_NO_REGISTERS)
            continue
        read: list[Any] = []
        for o in ins.uses:
            if type(o) is VReg or type(o) is Register:  # most operands are virtual registers: that test first
                if o not in read:
                    read.append(o)
            elif o is not None:  # a memory operand reads its registers (inline: one per instruction or so)
                for r in getattr(o, "regs", ()):
                    if r not in read and isinstance(r, _REG_TYPES):
                        read.append(r)
        written = defs = ins.defs  # usually all registers: then shared (neither list is ever changed)
        for o in defs:
            if type(o) is not VReg and type(o) is not Register:
                written = []
                for o in defs:
                    if type(o) is VReg or type(o) is Register:
                        written.append(o)
                    elif o is not None:
                        _read_inside(o, read)
                break
        append((read, written))
    return out


def _read_inside(operand: Any, read: list[Any]) -> None:
    """The registers an operand holds (a memory operand's base and index) are read."""
    for r in getattr(operand, "regs", ()):
        if r not in read and isinstance(r, _REG_TYPES):
            read.append(r)


def _intervals(regs: list[tuple[list[Any], list[Any]]]) -> tuple[dict[VReg, Interval], set[Register]]:
    """Each virtual register's interval from its first to its last mention (by position in the program), in
    order of first mention (so in start order), and the physical registers named."""
    by_vreg: dict[VReg, Interval] = {}
    physical: set[Any] = set()
    get = by_vreg.get
    for i, (read, written) in enumerate(regs):
        for r in read + written:  # one list: cheaper than a loop over the two
            iv = get(r)
            if iv is not None:
                iv.end = i
            elif type(r) is VReg:
                by_vreg[r] = Interval(r, i, i)
            else:
                physical.add(r)
    return by_vreg, physical


def _extend_over_loops(program: list[Any], by_vreg: dict[VReg, Interval]) -> None:
    """A value that is live into a loop (defined before it, used inside) stays live through its back edge."""
    loops: list[tuple[int, int]] = []  # (start, end), in the order the loops end
    open_loops: dict[Any, int] = {}
    for i in compress(itertools.count(), map(operator.is_not, map(type, program), itertools.repeat(MInst))):
        ins = program[i]
        if type(ins) is LoopStart:
            open_loops[ins.label] = i
        elif type(ins) is LoopEnd:
            loops.append((open_loops.pop(ins.label), i))
    if not loops:
        return
    # One pass in the order the loops end is enough: an interval extended to a loop's end can only be live into
    # loops ending later. Intervals are in start order: those starting before a loop are a prefix
    ivs = list(by_vreg.values())
    starts = list(map(_START, ivs))
    for start, end in loops:
        for iv in ivs[:bisect.bisect_left(starts, start)]:
            if start <= iv.end < end:
                iv.end = end


@dataclass
class RegisterPlan:
    """Where every virtual register lives, before the program is rewritten: lets a renderer compare two
    candidate programs by their spill code without building both rewritten programs."""
    program: list[Any]                             # after two-address coalescing
    regs: list[tuple[list[Any], list[Any]]]        # instruction_registers(program)
    by_vreg: dict[VReg, Interval]
    frame: int                                     # stack bytes for spill slots
    target: AllocTarget
    physical: set[Register] = field(default_factory=set)  # physical registers the program names
    spilled: list[Interval] = field(default_factory=list)  # the intervals given a stack slot

    def spill_code(self, cls: str) -> int:
        """How many fills and spill stores of class ``cls`` the rewritten program has."""
        spilled = [iv.vreg for iv in self.spilled if iv.vreg.cls == cls]
        if not spilled:  # the common case: no need to look at the program
            return 0
        # one fill per instruction reading a spilled register, one store per write
        mentions = Counter(itertools.chain.from_iterable(itertools.chain.from_iterable(self.regs)))
        return sum(map(mentions.__getitem__, spilled))

    def rewrite(self) -> tuple[list[Any], int]:
        """(the program on physical registers with spill code, stack bytes for spill slots)."""
        return _rewrite(self.program, self.regs, self.by_vreg, self.target), self.frame

    # for a renderer that encodes straight from the plan (no rewritten program): the assignment, and the
    # rewritten form of the instructions it does not handle itself (copies, spill code)

    def assignment(self) -> dict[VReg, Register | None]:
        """Each virtual register's register (None: spilled to its stack slot)."""
        return {v: iv.reg for v, iv in self.by_vreg.items()}

    def rewrite_one(self, i: int, assignment: dict[VReg, Register | None]) -> list[Any]:
        """What ``rewrite`` turns instruction ``i`` (an ``MInst``) into: itself on physical registers, with
        fills before and spill stores after; nothing for a copy to its own register. ``assignment`` is
        ``self.assignment()``."""
        out: list[Any] = []
        read, written = self.regs[i]
        _rewrite_one(self.program[i], read, written, assignment, self.by_vreg, self.target, out)
        return out

    def spill_registers(self, i: int, assignment: dict[VReg, Register | None]
                        ) -> tuple[dict[Any, Register], list[tuple[Register, int]], list[tuple[Register, int]]]:
        """What ``rewrite_one`` makes of instruction ``i``, as data: the register each register it names is on (a
        spilled one: its scratch register), the (scratch register, slot) of each fill before it and of each spill
        store after it. For a renderer encoding spill code without building its instructions."""
        read, written = self.regs[i]
        mapping = _registers_on(read, written, assignment)
        fills: list[tuple[Register, int]] = []
        stores: list[tuple[Register, int]] = []
        # asked of instructions with spill code (and copies): not whether there is any first (``None in
        # mapping.values()`` calls the Register dataclass's Python __eq__ once per register)
        _spill_code(read, written, self.by_vreg, self.target, mapping, fills, stores)
        return mapping, fills, stores  # type: ignore[return-value]  # no None left


def allocate(program: list[Any], target: AllocTarget) -> tuple[list[Any], int]:
    """Assign registers; returns (program on physical registers, stack bytes for spill slots)."""
    return plan_registers(program, target).rewrite()


def plan_registers(program: list[Any], target: AllocTarget,
                   regs: list[tuple[list[Any], list[Any]]] | None = None) -> RegisterPlan:
    """The linear scan: an interval per virtual register, each given a register or a spill slot. ``regs`` is
    ``instruction_registers(program)`` when the caller has it already."""
    if regs is None:
        regs = instruction_registers(program)
    program, regs = _coalesce_two_address(program, regs, target)
    by_vreg, physical = _intervals(regs)
    _extend_over_loops(program, by_vreg)
    intervals = sorted(by_vreg.values(), key=_START_END)
    frame, spilled = _linear_scan(intervals, by_vreg, _copy_sources(program), target,
                                  lambda: _loop_heat(program, regs))
    return RegisterPlan(program, regs, by_vreg, frame, target, physical, spilled)


def _loop_heat(program: list[Any], regs: list[tuple[list[Any], list[Any]]]) -> dict[VReg, tuple[int, int]]:
    """Each virtual register's (deepest loop nesting at which it is mentioned, mentions at that depth): what a
    spill of it costs, roughly, since a spilled register is filled or stored at every mention."""
    heat: dict[VReg, tuple[int, int]] = {}
    depth = 0
    for ins, (read, written) in zip(program, regs, strict=True):
        kind = type(ins)
        if kind is LoopStart:
            depth += 1
        elif kind is LoopEnd:
            depth -= 1
        for r in read + written:
            if type(r) is VReg:
                d, n = heat.get(r, (-1, 0))
                if depth > d:
                    heat[r] = (depth, 1)
                elif depth == d:
                    heat[r] = (d, n + 1)
    return heat


def _linear_scan(intervals: list[Interval], by_vreg: dict[VReg, Interval], copy_source: dict[VReg, VReg],
                 target: AllocTarget, loop_heat: Callable[[], dict[VReg, tuple[int, int]]] | None = None
                 ) -> tuple[int, list[Interval]]:
    """Give each interval (in start order) a register or a stack slot: (stack bytes for the slots, the intervals
    spilled). When a register must be freed, the interval spilled is the one mentioned in the shallowest loops
    (``loop_heat``, worked out at the first spill), fewest times at that depth, then the one ending last: in a loop
    nest, values only the outer loops read go to the stack before those the innermost loop reads every step."""
    heat: dict[VReg, tuple[int, int]] | None = None

    def spill_order(a: Interval) -> tuple[int, int, int]:
        d, n = heat.get(a.vreg, (0, 0)) if heat is not None else (0, 0)
        return -d, -n, a.end
    # intervals holding a register, in the order they got it: the free pool of the register's class (it goes back there)
    active: dict[Interval, list[Register]] = {}
    free = {cls: list(regs) for cls, regs in target.registers.items()}
    spilled: list[Interval] = []
    frame = 0

    def take_slot(iv: Interval) -> None:
        nonlocal frame
        size = target.slot_size(iv.vreg.cls)
        frame = (frame + size - 1) // size * size + size
        iv.slot = frame - size
        spilled.append(iv)

    # an interval's register is free again (if it still holds it then) from the first interval starting after it
    # ends: that point is found for each interval at once; registers freed at one point go back in the order taken
    starts = list(map(_START, intervals))
    free_at = list(map(bisect.bisect_right, itertools.repeat(starts), map(_END, intervals)))
    order = sorted(range(len(intervals)), key=free_at.__getitem__)  # stable: in the order taken at each point
    releasing = list(map(intervals.__getitem__, order))
    release_at = sorted(free_at) + [len(intervals)]  # a point never reached ends the list
    # the interval of the copy source of each (None: not written by a copy of a virtual register), looked up in C
    sources: Iterator[Interval | None] = itertools.repeat(None)
    if copy_source:
        sources = map(by_vreg.get, map(copy_source.get, map(_VREG, intervals)))  # type: ignore[arg-type]
    k = 0
    next_release = release_at[0]
    for n, iv, src_iv in zip(itertools.count(), intervals, sources):
        if next_release <= n:
            while release_at[k] <= n:
                ended = releasing[k]
                k += 1
                ended_pool = active.pop(ended, None)
                if ended_pool is not None:
                    ended_pool.append(ended.reg)  # type: ignore[arg-type]
            next_release = release_at[k]
        vreg = iv.vreg
        if src_iv is not None and src_iv.end == iv.start and src_iv in active and (
                vreg.allowed is None or src_iv.reg in vreg.allowed):
            iv.reg = src_iv.reg
            active[iv] = active.pop(src_iv)
            continue
        cls = vreg.cls
        try:
            pool = free[cls]
        except KeyError:
            raise AllocationError(f"no registers of class {cls!r} for {vreg}") from None
        allowed = vreg.allowed
        if allowed is None:
            if pool:
                iv.reg = pool.pop(0)
                active[iv] = pool
                continue
        else:
            choice = next((r for r in pool if r in allowed), None)
            if choice is not None:
                iv.reg = choice
                pool.remove(choice)
                active[iv] = pool
                continue
        if allowed is not None:  # pinned: evict whoever holds an allowed register
            holders = [a for a in active if a.reg in allowed and a.vreg.allowed is None]
            if not holders and len(allowed) > 1:  # pinned to a set: others pinned to it can be spilled as well
                holders = [a for a in active if a.reg in allowed and a.vreg.allowed == allowed]
            if not holders:
                raise AllocationError(f"{vreg} needs one of {allowed}, all held by pinned values")
            victim = max(holders, key=_END)
        else:
            candidates = [a for a in active if a.vreg.cls == cls and a.vreg.allowed is None] + [iv]
            if heat is None and loop_heat is not None:
                heat = loop_heat()
            victim = max(candidates, key=spill_order)
        if victim is iv:
            take_slot(iv)
            continue
        iv.reg, victim.reg = victim.reg, None
        take_slot(victim)
        del active[victim]
        active[iv] = pool
    return frame, spilled


def _coalesce_two_address(program: list[Any], regs: list[tuple[list[Any], list[Any]]], target: AllocTarget
                          ) -> tuple[list[Any], list[tuple[list[Any], list[Any]]]]:
    """Make ``dst = op(a, b)`` two-address by copying ``a`` into ``dst`` first (the copy is free when
    ``a`` dies here and the allocator gives both the same register; copies of a register to itself
    are dropped after allocation). Returns the program and its registers."""
    # only an instruction writing a register can need it: the target is asked about those alone
    writers = list(compress(itertools.count(), map(operator.itemgetter(1), regs)))
    two_address = target.two_address
    if type(two_address) is str:
        args = map(getattr, map(program.__getitem__, writers), itertools.repeat("arg"))
        two = list(compress(writers, map(getattr, args, itertools.repeat(two_address), itertools.repeat(False))))
    else:
        two = list(compress(writers, map(two_address, map(program.__getitem__, writers))))  # type: ignore[arg-type]
    copies: list[int] = []
    for i in two:
        ins = program[i]
        dst = ins.defs[0]
        if type(dst) is VReg and ins.uses and ins.uses[0] is not dst and isinstance(ins.uses[0], _REG_TYPES):
            copies.append(i)
    if not copies:
        return program, regs
    program, regs = list(program), list(regs)
    for i in reversed(copies):  # from the back: the positions ahead stay right
        ins = program[i]
        dst, first = ins.defs[0], ins.uses[0]
        paired = MInst(ins.op, ins.defs, [dst, *ins.uses[1:]], ins.arg)
        program[i:i + 1] = [MInst("copy", [dst], [first]), paired]
        regs[i:i + 1] = [([first], [dst]), _registers_of_all([paired])[0]]
    return program, regs


def _copy_sources(program: list[Any]) -> dict[VReg, VReg]:
    """The source of the (last) copy writing each virtual register, when it is a virtual register: a copy whose
    source dies at the copy can reuse the source's register (then the copy vanishes)."""
    ops = map(getattr, program, itertools.repeat("op"), itertools.repeat(None))
    out: dict[VReg, VReg] = {}
    for i in compress(itertools.count(), map(operator.eq, ops, itertools.repeat("copy"))):
        ins = program[i]
        if type(ins.uses[0]) is VReg:
            out[ins.defs[0]] = ins.uses[0]
    return out


def _rewrite(program: list[Any], regs: list[tuple[list[Any], list[Any]]], by_vreg: dict[VReg, Interval],
             target: AllocTarget) -> list[Any]:
    out: list[Any] = []
    append = out.append
    reg_of: dict[VReg, Register | None] = {v: iv.reg for v, iv in by_vreg.items()}  # None: spilled
    for ins, (read, written) in zip(program, regs, strict=True):
        if type(ins) is not MInst:
            append(ins)
        else:
            _rewrite_one(ins, read, written, reg_of, by_vreg, target, out)
    return out


def _rewrite_one(ins: MInst, read: list[Any], written: list[Any], reg_of: dict[VReg, Register | None],
                 by_vreg: dict[VReg, Interval], target: AllocTarget, out: list[Any]) -> None:
    """Append ``ins`` on physical registers to ``out``, with its fills before and spill stores after (a copy to
    its own register vanishes)."""
    mapping = _registers_on(read, written, reg_of)
    spilled_defs: list[tuple[Register, int]] = []
    if None in mapping.values():  # fills into scratch registers before, spills after
        fills: list[tuple[Register, int]] = []
        _spill_code(read, written, by_vreg, target, mapping, fills, spilled_defs)
        out.extend(itertools.starmap(target.fill, fills))
    if ins.op == "copy":
        dst, src = mapping.get(ins.defs[0], ins.defs[0]), mapping.get(ins.uses[0], ins.uses[0])
        if dst is not src and dst != src:
            out.append(target.copy(dst, src))
    else:
        out.append(MInst(ins.op, _substitute_all(ins.defs, mapping), _substitute_all(ins.uses, mapping), ins.arg))
    if spilled_defs:
        out.extend(itertools.starmap(target.spill, spilled_defs))


def _registers_on(read: list[Any], written: list[Any], reg_of: dict[VReg, Register | None]
                  ) -> dict[Any, Register | None]:
    """The register of each register an instruction names: a virtual one's (None: spilled), a physical one itself."""
    mapping = dict(zip(read, map(reg_of.get, read, read), strict=True))
    mapping.update(zip(written, map(reg_of.get, written, written), strict=True))
    return mapping


def _substitute_all(operands: list[Any], mapping: dict[Any, Register | None]) -> list[Any]:
    """``operands`` with their registers replaced by ``mapping`` (a memory operand substitutes its own, through its
    ``with_regs``; anything else stays)."""
    out = list(map(mapping.get, operands, operands))
    for k in compress(itertools.count(), map(hasattr, operands, itertools.repeat("with_regs"))):
        out[k] = operands[k].with_regs(mapping)
    return out


def _spill_code(read: list[Any], written: list[Any], by_vreg: dict[VReg, Interval], target: AllocTarget,
                mapping: dict[Any, Register | None], fills: list[tuple[Register, int]],
                spilled_defs: list[tuple[Register, int]]) -> None:
    """Scratch registers for the spilled registers of an instruction reading ``read`` and writing ``written`` (None
    in ``mapping``, which gets them): the (register, slot) fills of the ones it reads go to ``fills``, the stores of
    the ones it writes to ``spilled_defs``."""
    spilled_written = [r for r in written if mapping[r] is None]  # before the fills give some a register
    pools: dict[str, list[Register]] = {}
    for r in read:
        if mapping[r] is None:
            reg = mapping[r] = _take_scratch(pools, target, r)
            slot = by_vreg[r].slot
            assert slot is not None
            fills.append((reg, slot))
    pools = {}  # reads are done: reuse theirs
    for r in spilled_written:
        dst = mapping[r]
        if dst is None:
            dst = mapping[r] = _take_scratch(pools, target, r)
        slot = by_vreg[r].slot
        assert slot is not None
        spilled_defs.append((dst, slot))


def _take_scratch(pools: dict[str, list[Register]], target: AllocTarget, v: VReg) -> Register:
    """The first scratch register of ``v``'s class (one it is allowed in) not taken from ``pools`` yet; ``pools``
    holds what is left of each class (a copy of ``target.scratch``, made when first needed)."""
    pool = pools.get(v.cls)
    if pool is None:
        pool = pools[v.cls] = list(target.scratch.get(v.cls, ()))
    if v.allowed is None:
        if pool:
            return pool.pop(0)
    else:
        for r in pool:
            if r in v.allowed:
                pool.remove(r)
                return r
    raise AllocationError(f"out of scratch registers of class {v.cls!r} for a spilled {v}")
