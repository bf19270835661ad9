"""ISA renderers: the generic way from a kernel's linear UOps to machine code.

In:  the linear UOp list codegen hands a ``linear`` renderer (see ``tgcore.codegen.linearize``).
Out: ``render`` returns the encoded bytes; ``lower`` the program before encoding; ``asm`` its listing.

A backend is a subclass of ``ISARenderer`` that fills in the stages below as class attributes and
hook methods; ``render`` (a template method) runs them in this order:

    pre_isel       PatternMatcher or None: a graph rewrite of the kernel before it is linearized
                   (exposed as the renderer's ``legalize``, which ``get_program`` applies)
    spec           PatternMatcher: the UOp shapes isel accepts (``verify``; checked when TG_SPEC=1)
    isel           PatternMatcher applied to the linear UOps (``ctx.selected_lines()``) by ``line_rewrite``
                   with an ``ISelContext`` (``context`` hook): rules emit machine instructions into
                   ``ctx.prog`` (or return them) and record each UOp's value in ``ctx.val``
    pre_regalloc   hook ``(program, ctx) -> program`` on virtual registers (dead code, peepholes)
    regalloc       the core's linear scan (``tgcore.codegen.regalloc``) driven by ``target``, an
                   ``AllocTarget``: register classes, scratch registers, the two-address query and the
                   copy/spill/fill builders. ``choose_plan`` hook: which program to allocate when a
                   backend can select a kernel more than one way (default: the one isel made)
    late_regalloc  hook ``(program, ctx) -> program`` on physical registers, with spill code
    post_regalloc  hook ``(program, stack_bytes, ctx) -> program``: frame, prologue/epilogue, and the
                   backend's own instruction form (``callee_saved`` lists registers it must preserve)
    asm / encode   ``asm(program) -> str`` (listing) and ``encode(program) -> bytes``
    emit           hook ``(plan, ctx) -> bytes``: from the chosen plan to the bytes. By default the plan's
                   rewritten program through late_regalloc, post_regalloc and encode; a backend may encode
                   straight from the plan instead (no intermediate programs), as long as the bytes are those
                   of the staged way, which ``lower`` keeps (``DEBUG=4`` listings, ``asm``)

The regalloc hooks are plain methods, not matchers: each sees the whole instruction list (they count
uses, compare candidates, lay out frames), and a backend that wants rules there runs ``line_rewrite``
with its own matcher inside the hook. Only isel is rules-first, because it is one rule per UOp.

``line_rewrite(lines, matcher, ctx)`` rewrites any linear list whose lines have an ``op`` the matcher
indexes (UOps here): each line goes to the rules of its op; a rule returns the lines replacing it (an
empty tuple when it emitted them into ``ctx``'s list itself), or None to fall through to the next rule;
a line no rule takes is kept (or, with ``strict``, is an error).
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from tgcore.codegen import regalloc
from tgcore.codegen.regalloc import AllocTarget, LoopEnd, LoopStart, MInst, Register, RegisterPlan, VReg
from tgcore.helpers import cyclic_gc_paused
from tgcore.renderer import Renderer
from tgcore.uop import Ops, UOp
from tgcore.uop.pattern import PatternMatcher, UPat
from tgcore.uop.spec import spec_alu, spec_enabled, type_verify


class LineRewriteError(NotImplementedError):
    """``line_rewrite(strict=True)`` met a line no rule takes (an ISA renderer: a UOp it cannot select)."""


def line_rewrite(lines: Iterable[Any], matcher: PatternMatcher, ctx: Any = None, out: list | None = None,
                 strict: bool = False) -> list:
    """Rewrite a linear list line by line; returns ``out`` (a new list when not given).

    Each line is matched against the rules of its op, in order, with ``ctx`` passed to rules that ask
    for it. The first rule returning something other than None (or the line itself) replaces the line
    by the lines it returned, appended to ``out``; a rule may instead append to ``out`` through ``ctx``
    (isel emits into ``ctx.prog``, which is ``out``) and return ``()``. A line no rule takes is kept,
    or raises ``LineRewriteError`` when ``strict``."""
    out = [] if out is None else out
    # the matcher's per-op functions (compiled: all rules of an op fused into one generated function),
    # called directly: this loop runs once per line of every kernel
    by_op = matcher._by_op if matcher._by_op is not None else matcher._index()
    append, extend = out.append, out.extend
    for line in lines:
        r = by_op[line.op](line, ctx)
        if r is None:
            if strict:
                raise LineRewriteError(f"no rule for line {_describe(line)}")
            append(line)
        elif r:  # () when the rule emitted into ctx itself
            extend(r)
    return out


def _describe(line: Any) -> str:
    if isinstance(line, UOp):
        return f"{line.op.name} dtype={line.dtype!r} arg={line.arg!r} src=({', '.join(s.op.name for s in line.src)})"
    return repr(line)


class ISelContext:
    """What isel rules see besides their UOp: the kernel's lines and each one's consumers, the value
    selected for each UOp, a factory of virtual registers, and the instruction list being emitted.

    ``users[u]`` lists the lines that read ``u``, once per source slot (``a * a`` lists its user twice),
    in line order (``users.get(u)`` is None for a line nothing reads). Backends subclass it to keep their own
    selection state."""

    def __init__(self, uops: list[UOp], isel: PatternMatcher) -> None:
        self.uops = uops
        self.isel = isel
        self.users: dict[UOp, list[UOp]] = _users(uops)
        self.val: dict[UOp, Any] = {}     # UOp -> its value (a register, registers, or whatever the backend uses)
        self.prog: list[Any] = []         # the instructions emitted so far
        self.ids = itertools.count()

    def new(self, cls: str, allowed: tuple[Register, ...] | None = None) -> VReg:
        """A fresh virtual register of class ``cls``, optionally limited to the ``allowed`` registers."""
        return VReg(next(self.ids), cls, allowed)

    def selected_lines(self) -> Iterable[UOp]:
        """The lines isel runs its rules on: all of them here; a backend may leave out the lines its rules
        select nothing for (e.g. constants it reads where they are used)."""
        return self.uops

    def select_line(self, u: UOp) -> None:
        """Select one more UOp with the same rules, at this point of the program (a rule that splits a
        value, e.g. one lane of a vector op at a time, selects the pieces it makes this way)."""
        line_rewrite((u,), self.isel, self, self.prog, strict=True)


def _users(uops: list[UOp]) -> dict[UOp, list[UOp]]:
    """Each line's users (see ``ISelContext``): every line that reads it, once per source slot, in line order (a
    line nothing reads has no entry until asked for: then it is an empty list)."""
    users: dict[UOp, list[UOp]] = defaultdict(list)
    # get, then a new list or an append: faster than ``users[s].append(u)``, whose lookup on a dict subclass is
    # not specialized (one source in five is a new key)
    get = users.get
    for u in uops:
        for s in u.src:
            found = get(s)
            if found is None:
                users[s] = [u]
            else:
                found.append(u)
    return users


# what a linearized kernel holds besides the ALU ops spec_alu checks
LINEAR_OPS = frozenset({Ops.PARAM, Ops.DEFINE_REG, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.END, Ops.AFTER, Ops.GROUP,
                        Ops.NOOP})
# the default spec of an ISA renderer's input: ALU ops with their dtype rules, and the linear ops
isa_spec = spec_alu + PatternMatcher([(UPat(LINEAR_OPS), lambda: True)])


Ctx = TypeVar("Ctx", bound=ISelContext)


class ISARenderer(Renderer, Generic[Ctx]):
    """A renderer producing machine code through isel -> register allocation -> encoding (see module doc).
    ``Ctx`` is the backend's isel context class (what ``context`` returns)."""
    linear = True
    pre_isel: PatternMatcher | None = None
    isel: PatternMatcher
    spec: PatternMatcher = isa_spec
    target: AllocTarget
    callee_saved: tuple[Register, ...] = ()

    @property  # type: ignore[override]
    def legalize(self) -> PatternMatcher | None:
        """``get_program`` applies a renderer's ``legalize`` to the kernel graph before linearizing it."""
        return self.pre_isel

    # -- stages (hooks; defaults do nothing) --

    def context(self, uops: list[UOp]) -> Ctx:
        """The isel context for one kernel (backends return their subclass)."""
        return ISelContext(uops, self.isel)  # type: ignore[return-value]

    def select(self, uops: list[UOp]) -> Ctx:
        """Instruction selection: ``isel`` over the lines; the program is ``ctx.prog``."""
        ctx = self.context(uops)
        line_rewrite(ctx.selected_lines(), ctx.isel, ctx, ctx.prog, strict=True)
        return ctx

    def pre_regalloc(self, program: list[Any], ctx: Ctx) -> list[Any]:
        return program

    def plan(self, program: list[Any], ctx: Ctx) -> RegisterPlan:
        """``pre_regalloc``, then the linear scan's plan for the result (rewritten only if chosen)."""
        return regalloc.plan_registers(self.pre_regalloc(program, ctx), self.target)

    def choose_plan(self, ctx: Ctx) -> RegisterPlan:
        """The register plan to keep. A backend with several ways to select a kernel (e.g. reloading
        values where used instead of holding them, under register pressure) plans each candidate with
        ``plan`` here and returns the cheapest."""
        return self.plan(ctx.prog, ctx)

    def late_regalloc(self, program: list[Any], ctx: Ctx) -> list[Any]:
        return program

    def post_regalloc(self, program: list[Any], stack_bytes: int, ctx: Ctx) -> Any:
        return program

    def asm(self, program: Any) -> str:
        return "\n".join(map(str, program))

    def encode(self, program: Any) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} has no encode()")

    def emit(self, plan: RegisterPlan, ctx: Ctx) -> bytes:
        """The bytes of the chosen plan (``render`` without a listing). A backend overriding this must give the
        bytes ``encode(lower(...))`` gives."""
        program, stack_bytes = plan.rewrite()
        return self.encode(self.post_regalloc(self.late_regalloc(program, ctx), stack_bytes, ctx))

    # -- the template --

    def verify(self, uops: list[UOp]) -> None:
        """Raise ``SpecError`` at the first line ``spec`` does not allow."""
        type_verify(uops, self.spec, name=f"{type(self).__name__} isel input")

    def lower(self, name: str, uops: list[UOp]) -> Any:
        """The kernel as the backend's allocated program (everything but encoding)."""
        if spec_enabled():
            self.verify(uops)
        ctx = self.select(uops)
        program, stack_bytes = self.choose_plan(ctx).rewrite()
        return self.post_regalloc(self.late_regalloc(program, ctx), stack_bytes, ctx)

    def render(self, name: str, kernel: list[UOp] | UOp) -> bytes:
        if not isinstance(kernel, list):
            raise TypeError(f"{type(self).__name__} renders linear programs (a list of UOps)")
        with cyclic_gc_paused():   # a render allocates thousands of short-lived objects (see the helper)
            return self._render(name, kernel)

    def _render(self, name: str, kernel: list[UOp]) -> bytes:
        from tgcore.helpers import DEBUG
        if DEBUG >= 4:  # the staged way, to print the listing of what is encoded
            program = self.lower(name, kernel)
            print(f"; {name}\n{self.asm(program)}")
            return self.encode(program)
        if spec_enabled():
            self.verify(kernel)
        ctx = self.select(kernel)
        return self.emit(self.choose_plan(ctx), ctx)


def callee_saved_used(program: Iterable[Any], callee_saved: Iterable[Register]) -> list[Register]:
    """The registers of ``callee_saved`` an allocated program mentions (a prologue saves these), in
    ``callee_saved`` order."""
    seen: set[Register] = set()
    for ins in program:
        if type(ins) is MInst:
            seen.update(ins.registers_written())
            seen.update(r for r in ins.registers_read() if type(r) is Register)
    return [r for r in callee_saved if r in seen]


__all__ = ["AllocTarget", "ISARenderer", "ISelContext", "LineRewriteError", "LoopEnd", "LoopStart", "MInst", "Register",
           "RegisterPlan", "VReg", "callee_saved_used", "isa_spec", "line_rewrite"]
