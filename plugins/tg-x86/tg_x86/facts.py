"""Analysis before selection: what one kernel's lines are and which of them selection fuses.

In:  a kernel's linear UOps and each line's users (``ISelContext.users``).
Out: ``analyze`` -> a frozen ``KernelFacts``: where each line stands and its op as one byte (lines of an op are found
     in C), the argument layout, and the fusions decided before any instruction is emitted: loads folded into
     broadcasts and into their ALU user, compares only flags (or masks) read, vector compares into blends,
     shuffles, horizontal reductions, ``a*b + c`` as one FMA, index sums only addresses read. Selection reads
     these facts and never changes them; its state is the emitter's.

Each fact is found from the lines of the ops it concerns (``lines``: picked in C from the op codes), most lines
being none of them.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import compress
from typing import Any

from tg_x86.bytevec import is_bytes, repeated_load, widened_bytes
from tg_x86.lanes import (
    _LANE,
    _OP,
    _VECTOR,
    ADD_MUL,
    BARRIER_TABLE,
    BROADCASTABLE,
    CMP_OPS,
    COMMUTATIVE,
    FOLD_OPS,
    HRED,
    HRED_OPS,
    OP_CODE,
    VCMP_OPS,
    VFOLD_OPS,
    by_dtype,
    esize,
    is_vconst,
    is_vec,
    is_vector,
    is_vzero,
    kind,
    line_table,
    memo,
    native,
    op_table,
    piece_bits,
    piece_lanes,
    scalar_of,
    shuffle_plan,
)
from tgcore.dtype import AddrSpace, DType, PtrDType, dtypes
from tgcore.renderer.cbytedot import DOT_ACC_HELPER, DOT_HELPER, byte_table_lookup
from tgcore.uop import Ops, UOp

# the ops the per-line helpers test, as module names: on Python 3.11 reading ``Ops.CONST`` goes through EnumType's
# __getattr__ hook (a Python-level call, ~0.1 us: five times a global read), and these run for most lines
CONST, AFTER, GEP = Ops.CONST, Ops.AFTER, Ops.GEP
NO_CODE_OPS = frozenset({Ops.CONST, Ops.SINK, Ops.GROUP, Ops.NOOP, Ops.INDEX})  # selected where used, or nothing
CODE_OPS = frozenset(Ops) - NO_CODE_OPS - {Ops.VCONST}   # the lines selection visits (selected_lines)
CODE_TABLE = op_table(CODE_OPS)
RANGE_CODE = OP_CODE[Ops.RANGE]
FOLDABLE_LOADS = frozenset({dtypes.float32, dtypes.float64})   # float loads an ALU op can read from memory

# a dtype whose a*b + c may fuse into one FMA: float32/float64 scalars and vectors
fma_dtype = by_dtype(lambda dt: dt.scalar() in FOLDABLE_LOADS and not isinstance(dt, PtrDType))
# a pointer into DEFINE_REG storage (accumulators held in registers)
in_registers = by_dtype(lambda dt: getattr(dt, "addrspace", AddrSpace.GLOBAL) is AddrSpace.REG)


def is_reg_index(idx: UOp) -> bool:
    """Does INDEX ``idx`` point into an accumulator held in registers?"""
    return in_registers(idx.src[0].dtype)


def define_reg(idx: UOp) -> UOp:
    """The DEFINE_REG an accumulator INDEX points into (through its AFTERs)."""
    p = idx.src[0]
    while p.op is AFTER:
        p = p.src[0]
    return p


@dataclass(frozen=True, eq=False)
class KernelLines:
    """A kernel's lines: their order, users and op codes, and the questions asked of them."""
    uops: list[UOp]
    users: Mapping[UOp, list[UOp]]   # ISelContext.users (shared: a line nothing reads has no entry)
    pos: Mapping[UOp, int]           # each line's position
    codes: bytes                     # each line's op (see OP_CODE)
    barriers: bytes                  # 1 at each line of BARRIER_OPS, else 0

    def positions(self, ops: Ops | frozenset[Ops]) -> list[int]:
        """The positions of the lines of ``ops`` (one op or a set of them), in order."""
        return list(compress(range(len(self.uops)), self.codes.translate(line_table(ops))))

    def lines(self, ops: Ops | frozenset[Ops]) -> list[UOp]:
        """The lines of ``ops`` (one op or a set of them), in order. Picked in C (most lines are none of them)."""
        return list(compress(self.uops, self.codes.translate(line_table(ops))))

    def selected_lines(self) -> Iterable[UOp]:
        """The lines the rules run on: not constants and addresses (selected where they are used), nor lines
        that make no code (their rules would only return EMITTED). Filtered in C: a quarter of the lines."""
        return compress(self.uops, self.codes.translate(CODE_TABLE))

    def no_barrier(self, x: UOp, user: UOp) -> bool:
        """No store or loop boundary (``BARRIER_OPS``) between line x and a later line ``user``: x's value may be
        read (from memory) at the user."""
        pos = self.pos
        return self.barriers.find(1, pos[x] + 1, pos[user]) < 0

    def dies_at(self, x: UOp, user: UOp, at: UOp) -> bool:
        """Is the instruction selected at line ``at`` the last to read x's value? Its last user is ``user`` (selected
        at ``at``) and no loop starts in between (a value made before a loop and read inside it lives on)."""
        users, i = self.users.get(x), self.pos.get(x)
        if not users or i is None:
            return False
        return users[-1] is user and self.codes.find(RANGE_CODE, i + 1, self.pos[at]) < 0


@dataclass(frozen=True, eq=False)
class KernelFacts(KernelLines):
    """What selection knows of a kernel before emitting anything (see the module doc). Never changed."""
    nparams: int                       # PARAM lines
    pressure: int                      # gprs held for long: pointers, variables, each loop's counter and limit
    var_arg: Mapping[str, int]         # variable name -> its argument slot
    core_arg: int                      # the argument slot of core_id (the last)
    is_vconst: Callable[[UOp], bool]   # a CONST, VCONST or VECTORIZE of CONSTs (read from memory), memoized
    is_vzero: Callable[[UOp], bool]    # a constant vector of +0 in every lane (what vxorps makes), memoized
    bcast_loads: frozenset[UOp]        # scalar loads read only by a broadcast (vbroadcastss ymm, [mem])
    vfused_cmps: frozenset[UOp]        # vector compares only blends read (a mask, no bool)
    lane_geps: list[UOp]               # one-lane GEPs (the leaves of horizontal reductions)
    shuffles: Mapping[UOp, list[tuple]]   # VECTORIZE -> its shuffle_plan
    shuffled_lanes: frozenset[UOp]     # lane GEPs only shuffled VECTORIZEs read (nothing to extract)
    hred_roots: Mapping[UOp, UOp]      # root of a horizontal reduction -> the vector it reduces
    hred_skip: frozenset[UOp]          # the other nodes of those trees (they emit nothing)
    fma_adds: Mapping[UOp, tuple[UOp, UOp]]   # ADD -> (addend, MUL) selected as one FMA
    fma_muls: frozenset[UOp]           # their MULs, which emit nothing
    in_address: frozenset[UOp]         # index sums x + c only addresses read (folded into them)
    folded: frozenset[UOp]             # loads their one ALU user reads from memory (no register)
    widened: frozenset[UOp]            # int8/uint8 (and a BITCAST between) and float16/bfloat16 vector loads
    #                                    their one CAST to 32-bit lanes reads from memory: no value of their own
    narrowed: frozenset[UOp]           # float32 -> float16/bfloat16 vector CASTs their one STORE converts (no value)
    assembled: frozenset[UOp]          # uint8 vector loads one scalar BITCAST reads as one wider load (no value)
    flag_compares: frozenset[UOp]      # compares whose users all read their flags or mask (no bool made)
    acc_stores: Mapping[UOp, list[int]]   # accumulator -> the positions of the STOREs to it
    prefetch: Mapping[UOp, int]        # loads streaming a big input -> bytes ahead to prefetch (``plan_prefetches``)
    byte_dots: frozenset[UOp]          # the byte vectors byte-dot calls' operands are made of (``plan_byte_dots``)
    repeated_parts: frozenset[UOp]     # the lines of those repeating one short load (``plan_repeated_parts``)

    def fuses(self, mul: UOp, add: UOp) -> bool:
        """Can ``add`` (of a float dtype) and its source ``mul`` be one FMA? (see ``fuses``)"""
        return fuses(self, self.hred_roots, mul, add)


def analyze(uops: list[UOp], users: Mapping[UOp, list[UOp]]) -> KernelFacts:
    """The facts of one kernel (see ``KernelFacts``)."""
    codes = bytes(map(OP_CODE.__getitem__, map(_OP, uops)))
    k = KernelLines(uops, users, dict(zip(uops, range(len(uops)), strict=True)), codes, codes.translate(BARRIER_TABLE))
    # buffer k is argument k; a buffer no UOp reads still takes its place, so the variables and core_id follow the
    # highest buffer number
    params = k.lines(Ops.PARAM)
    nbufs = max([u.arg + 1 for u in params], default=0)
    variables = k.lines(Ops.DEFINE_VAR)
    names = {u.arg[0] for u in variables}
    nparams, nvars, nranges = len(params), len(variables), codes.count(RANGE_CODE)
    vconst, vzero = memo(is_vconst), memo(is_vzero)   # facts of this kernel's UOps, memoized per kernel
    lane_geps = [u for u in k.lines(GEP) if len(u.arg) == 1]
    shuffles = plan_shuffles(k, lane_geps)
    hred_roots, hred_skip = plan_horizontal(k, lane_geps)
    bcast_loads = plan_broadcast_loads(k)
    fma_adds = plan_fma(k, hred_roots)
    byte_dots = plan_byte_dots(k)
    return KernelFacts(
        k.uops, k.users, k.pos, k.codes, k.barriers, nparams=nparams, pressure=nparams + nvars + 2 * nranges,
        var_arg={n: nbufs + i for i, n in enumerate(sorted(names))}, core_arg=nbufs + len(names),
        is_vconst=vconst, is_vzero=vzero, bcast_loads=bcast_loads, vfused_cmps=plan_vector_compares(k),
        lane_geps=lane_geps, shuffles=shuffles,
        shuffled_lanes=frozenset(g for u in shuffles for g in u.src if all(x in shuffles for x in users[g])),
        hred_roots=hred_roots, hred_skip=hred_skip, fma_adds=fma_adds,
        fma_muls=frozenset(mul for _, mul in fma_adds.values()), in_address=plan_addresses(k),
        folded=plan_folded_loads(k, bcast_loads, vconst), widened=plan_widened_loads(k),
        narrowed=plan_narrowed_stores(k), assembled=plan_assembled_loads(k),
        flag_compares=plan_flag_compares(k),
        acc_stores=accumulator_stores(k), prefetch=plan_prefetches(k), byte_dots=byte_dots,
        repeated_parts=plan_repeated_parts(k, byte_dots))


def plan_prefetches(k: KernelLines) -> dict[UOp, int]:
    """The loads that prefetch (``tgcore.renderer.prefetch``, as the C renderer decides them: a reduction streaming
    a big input reads the next output rows' data ahead) -> how many bytes past their address."""
    from tgcore.renderer.prefetch import Prefetcher, loop_nest
    prefetcher = Prefetcher(k.uops)
    if prefetcher.buf is None:
        return {}
    _, loops_at = loop_nest(k.uops)
    out = {}
    for u in k.lines(Ops.LOAD):
        ahead = prefetcher.distance(u, loops_at[u])
        if ahead is not None:
            out[u] = ahead * u.src[0].src[0].dtype.base.itemsize  # type: ignore[attr-defined]
    return out


def plan_broadcast_loads(k: KernelLines) -> frozenset[UOp]:
    """Scalar loads whose only user is a VECTORIZE of that load in every lane: the broadcast reads memory."""
    out = set()
    for u in k.lines(Ops.VECTORIZE):
        if is_vector(u.dtype) and len(set(u.src)) == 1:   # every lane the same UOp
            s = u.src[0]
            if (s.op is Ops.LOAD and s.dtype in BROADCASTABLE and len(s.src) == 1 and len(s.src[0].src) == 2
                    and not is_reg_index(s.src[0]) and set(k.users.get(s, ())) == {u} and k.no_barrier(s, u)):
                out.add(s)
    return frozenset(out)


def plan_vector_compares(k: KernelLines) -> frozenset[UOp]:
    """Vector compares whose only users are WHEREs (of lanes of the same size) choosing on them: a mask each
    WHERE blends with, no bool made."""
    out = set()
    for u in k.lines(VCMP_OPS):
        if not is_vector(u.dtype):
            continue
        users, compared = k.users.get(u, []), u.src[0].dtype
        lane_size = esize(scalar_of(compared))
        if users and native(compared) and all(x.op is Ops.WHERE and native(x.dtype) and x.src[0] is u
                                              and x.src[1] is not u and x.src[2] is not u
                                              and esize(scalar_of(x.dtype)) == lane_size for x in users):
            out.add(u)
    return frozenset(out)


def plan_shuffles(k: KernelLines, lane_geps: list[UOp]) -> dict[UOp, list[tuple]]:
    """VECTORIZEs of single lanes of vectors that one vshufps/vshufpd per piece builds (``shuffle_plan``); the
    lane GEPs only they read extract nothing (``KernelFacts.shuffled_lanes``)."""
    shuffles: dict[UOp, list[tuple]] = {}
    if not lane_geps:
        return shuffles
    for u in k.lines(Ops.VECTORIZE):
        if is_vector(u.dtype) and all(s.op is GEP and len(s.arg) == 1 for s in u.src):
            plan = shuffle_plan(u.dtype, [(s.src[0], s.arg[0]) for s in u.src])
            if plan is not None:
                shuffles[u] = plan
    return shuffles


def plan_horizontal(k: KernelLines, lane_geps: list[UOp]) -> tuple[dict[UOp, UOp], frozenset[UOp]]:
    """Find upcast's horizontal reductions: a tree of one scalar op whose leaves are every lane of one
    vector, each once (interior nodes used only by their parent). The tree is reduced with vector ops
    instead: the pieces combined, then halves folded onto each other. (For float ADD this sums in
    another order than the tree; a reduction's order is not part of its meaning.) Returns (root -> vector,
    the other nodes)."""
    roots: dict[UOp, UOp] = {}
    skip: set[UOp] = set()
    # a tree's top is found by climbing from its leaves through nodes each read by its parent only (each
    # node climbed once): most lines of its ops are index math or vector arithmetic, never looked at
    climbed: set[UOp] = set()
    for leaf in lane_geps:
        users = k.users.get(leaf)
        if users is None or len(users) != 1 or users[0].op not in HRED_OPS:
            continue
        node = users[0]
        while node not in climbed:
            climbed.add(node)
            up = k.users.get(node)
            if up is None or len(up) != 1 or up[0].op is not node.op or up[0].dtype is not node.dtype:
                _plan_reduction(k, node, roots, skip)
                break
            node = up[0]
    return roots, frozenset(skip)


def _plan_reduction(k: KernelLines, u: UOp, roots: dict[UOp, UOp], skip: set[UOp]) -> None:
    """Reduce ``u``'s tree as a horizontal reduction if it is one (see ``plan_horizontal``)."""
    a, b = u.src   # a tree's nodes are lane GEPs and nodes of its op
    if a.op is not u.op and a.op is not Ops.GEP or b.op is not u.op and b.op is not Ops.GEP:
        return
    if is_vector(u.dtype) or not native(u.dtype):
        return
    if (u.op, kind(u.dtype)) not in HRED or any(x.op is u.op and x.dtype is u.dtype for x in k.users[u]):
        return
    nodes: list[UOp] = []
    leaves: list[tuple[UOp, int]] = []
    if not (_tree(k, a, u, nodes, leaves) and _tree(k, b, u, nodes, leaves)):
        return
    v = leaves[0][0]
    if v.dtype.count >= 4 and set(map(_VECTOR, leaves)) == {v} and sorted(map(_LANE, leaves)) == list(
            range(v.dtype.count)):
        roots[u] = v
        skip.update(nodes)


def _tree(k: KernelLines, x: UOp, parent: UOp, nodes: list[UOp], leaves: list[tuple[UOp, int]]) -> bool:
    if k.users.get(x) != [parent] or x.dtype is not parent.dtype:
        return False
    nodes.append(x)
    if x.op is GEP and len(x.arg) == 1:
        leaves.append((x.src[0], x.arg[0]))
        return True
    if x.op is not parent.op:
        return False
    a, b = x.src   # ADD, MUL and MAX read two values
    return _tree(k, a, x, nodes, leaves) and _tree(k, b, x, nodes, leaves)


def fuses(k: KernelLines, hred_roots: Mapping[UOp, Any], mul: UOp, add: UOp) -> bool:
    """Can ``add`` (of a float dtype) and its source ``mul`` be one FMA? A MUL of its dtype that only it reads,
    once, with no store or loop boundary in between (a load folded into the MUL is read at the ADD), and not
    the root of a horizontal reduction."""
    return (mul.op is Ops.MUL and add.op is Ops.ADD and mul.dtype is add.dtype and k.users.get(mul) == [add]
            and mul not in hred_roots and k.no_barrier(mul, add))


def plan_fma(k: KernelLines, hred_roots: Mapping[UOp, UOp]) -> dict[UOp, tuple[UOp, UOp]]:
    """Decide which float ``a*b + c`` become one FMA (contraction, as C compilers do by default: one rounding
    instead of two): an ADD of float32/float64 (a scalar, or a vector held in pieces) one of whose sources is a
    MUL of its dtype read only by this ADD, once (``fuses``); when both are, the second. The MUL emits nothing,
    the ADD the FMA (``isel.fma_order``). Found from the MULs: most ADDs are index math. Needs the horizontal
    reductions: the root of one is not a multiply to fuse. Returns ADD -> (addend, MUL)."""
    fma_adds: dict[UOp, tuple[UOp, UOp]] = {}
    for mul in k.lines(Ops.MUL):
        if not fma_dtype(mul.dtype):
            continue
        users = k.users.get(mul)
        if not users or not fuses(k, hred_roots, mul, users[0]):  # fuses: the ADD is its only user
            continue
        u = users[0]
        if u.src[1] is mul:
            c = u.src[0]
        elif fuses(k, hred_roots, u.src[1], u):
            continue   # u fuses its second source
        else:
            c = u.src[1]
        fma_adds[u] = (c, mul)
    return fma_adds


def plan_addresses(k: KernelLines) -> frozenset[UOp]:
    """Find the index sums ``x + c`` that only addresses read: ``mem`` folds each into its address (the index
    register x, c scaled into the displacement), so selecting one at its line would make a lea nothing reads.
    The test is ``mem``'s (x never negative, one lane), asked of every user, with a narrower constant so that
    the displacement always fits; where ``mem`` still asks for the sum, ``reg`` makes it there."""
    out = set()
    for u in k.lines(Ops.ADD):
        c = u.src[1]
        if c.op is not CONST or u.src[0].dtype.count != 1 or not -(1 << 27) < c.arg < (1 << 27):
            continue   # (the displacement: c times an element size, with room for a lane offset)
        users = k.users.get(u)
        if users and all(x.op is Ops.INDEX and x.src[1] is u for x in users) and u.src[0].vmin >= 0:
            out.add(u)
    return frozenset(out)


def accumulator_stores(k: KernelLines) -> dict[UOp, list[int]]:
    """For each accumulator, the positions of the STOREs to it, in order."""
    out: dict[UOp, list[int]] = {}
    for i in k.positions(Ops.STORE):
        s = k.uops[i]
        if is_reg_index(s.src[0]):
            out.setdefault(define_reg(s.src[0]), []).append(i)
    return out


def plan_folded_loads(k: KernelLines, bcast_loads: frozenset[UOp], vconst: Callable[[UOp], bool]) -> frozenset[UOp]:
    """The loads their only user reads from memory: a float32/64 scalar (``foldable``) or a vector of a
    broadcastable type (``vfoldable``), not from an accumulator, not read by a broadcast."""
    out = set()
    for u in k.lines(Ops.LOAD):
        if is_reg_index(u.src[0]):
            continue
        if is_vector(u.dtype):
            if native(u.dtype) and vfoldable(k, vconst, u):
                out.add(u)
        elif u not in bcast_loads and foldable(k, u):
            out.add(u)
    return frozenset(out)


BYTES = (dtypes.int8, dtypes.uint8)
HALVES = (dtypes.float16, dtypes.bfloat16)
INT32S = (dtypes.int32, dtypes.uint32)
WIDE_LANES = (dtypes.int32, dtypes.uint32, dtypes.float32)


def _xmm_or_ymm_pieces(dt: DType) -> bool:
    return all(n in (4, 8) for n in piece_lanes(dt)) and all(b <= 256 for b in piece_bits(dt))


def plan_widened_loads(k: KernelLines) -> frozenset[UOp]:
    """Narrow vector loads whose only user is a CAST to 32-bit lanes: bytes (the quantized weights of GEMVs; through
    a BITCAST between int8 and uint8 read only there) and float16/bfloat16 (to float32). The CAST reads them from
    memory and widens them (``vmemory.widening_cast``) instead of loading them lane by lane. Pieces of 4 or 8 lanes
    (xmm/ymm), no gate, no store or loop boundary between the load and the CAST."""
    out = set()
    for u in k.lines(Ops.CAST):
        if not is_vector(u.dtype) or scalar_of(u.dtype) not in WIDE_LANES or not _xmm_or_ymm_pieces(u.dtype):
            continue
        chain, s = [], u.src[0]
        if s.op is Ops.BITCAST and scalar_of(s.dtype) in BYTES and k.users.get(s, []) == [u]:
            chain.append(s)
            s = s.src[0]
        sdt = scalar_of(s.dtype)
        if not (sdt in BYTES or (sdt in HALVES and scalar_of(u.dtype) is dtypes.float32)):
            continue
        if (s.op is Ops.LOAD and len(s.src) == 1 and len(s.src[0].src) == 2 and not is_reg_index(s.src[0])
                and k.users.get(s, []) == [chain[0] if chain else u] and k.no_barrier(s, u)):
            out.update([s, *chain])
    return frozenset(out)


def plan_narrowed_stores(k: KernelLines) -> frozenset[UOp]:
    """float32 -> float16/bfloat16 and 8-lane int32 -> int8/uint8 vector CASTs whose only user is an ungated STORE of
    them to memory: the STORE converts the pieces and writes the narrow lanes (``vmemory.narrowing_store``). No line
    after the CAST reads its source (so nothing overwrites that register before the STORE reads it)."""
    out = set()
    for u in k.lines(Ops.CAST):
        src = u.src[0]
        halves = scalar_of(u.dtype) in HALVES and scalar_of(src.dtype) is dtypes.float32
        # int32 -> bytes (the activations' 8-bit rounding): 8 lanes, one ymm piece
        to_bytes = scalar_of(u.dtype) in BYTES and scalar_of(src.dtype) in INT32S and u.dtype.count == 8
        if not (is_vector(u.dtype) and (halves or to_bytes) and _xmm_or_ymm_pieces(src.dtype)):
            continue
        users = k.users.get(u, [])
        if len(users) != 1 or users[0].op is not Ops.STORE or users[0].src[1] is not u:
            continue
        idx = users[0].src[0]
        if len(idx.src) != 2 or is_reg_index(idx) or any(k.pos[x] > k.pos[u] for x in k.users.get(src, [])):
            continue
        out.add(u)
    return frozenset(out)


def _byte_tree(roots: Iterable[UOp]) -> set[UOp]:
    """The byte vectors ``roots`` are made of, and the one-lane GEPs of byte vectors among them."""
    out: set[UOp] = set()
    stack = list(roots)
    while stack:
        u = stack.pop()
        if u in out:
            continue
        lane = u.op is Ops.GEP and len(u.arg) == 1 and is_bytes(u.src[0].dtype)
        if lane or is_bytes(u.dtype):
            out.add(u)
            if repeated_load(u) is not None:   # (one broadcast from memory: its parts in plan_repeated_parts)
                continue
            at = byte_table_lookup(u)   # (a table's byte indices sit under its INDEX)
            stack.extend(u.src if at is None else (at,))
    return out


def plan_byte_dots(k: KernelLines) -> frozenset[UOp]:
    """The byte vectors the byte operands of byte-dot calls (``tg_dot4_u8i8``, ``tg_dot4_u8i8_acc``) and the CASTs
    of ``bytevec.widened_bytes`` are made of (those CASTs too), and the one-lane GEPs of them that only such vectors
    read: what ``bytedot.BYTE_ISEL`` selects. Byte vectors anywhere else keep the general vector rules (gated loads,
    widened loads, lanes read one by one); so does a widening CAST whose bytes something else reads too."""
    out = _byte_tree(s for u in k.lines(Ops.CUSTOMI) if u.arg in (DOT_HELPER, DOT_ACC_HELPER) for s in u.src[-2:])
    casts = {u: _byte_tree(u.src) for u in k.lines(Ops.CAST) if widened_bytes(u)}
    while True:   # drop the CASTs whose bytes a line outside every kept tree reads (until none is dropped)
        kept = out.union(casts, *casts.values())
        shared = [u for u, tree in casts.items()
                  if any(r not in kept for x in tree if x.op is not Ops.GEP for r in k.users.get(x, []))]
        if not shared:
            break
        for u in shared:
            del casts[u]
    # (a lane something else reads too is extracted by the general rules)
    return frozenset(u for u in kept if u.op is not Ops.GEP or all(r in kept for r in k.users.get(u, [])))


def plan_repeated_parts(k: KernelLines, byte_dots: frozenset[UOp]) -> frozenset[UOp]:
    """The lines a byte-dot operand that repeats one short load (``bytevec.repeated_load``: one broadcast from
    memory) is made of (the load, its bitcast to one int, the VECTORIZE of that int), where only that chain reads
    them: they emit nothing."""
    out: set[UOp] = set()
    for u in byte_dots:
        load = repeated_load(u)
        if load is None:
            continue
        vec, word = u.src[0], u.src[0].src[0]
        if (set(k.users.get(vec, ())) == {u} and set(k.users.get(word, ())) == {vec}
                and set(k.users.get(load, ())) == {word}):
            out.update((vec, word, load))
    return frozenset(out)


def plan_assembled_loads(k: KernelLines) -> frozenset[UOp]:
    """uint8 vector loads of 2, 4 or 8 bytes whose only user is a BITCAST to one unsigned integer of that size (how
    the legalizer ``combine_byte_loads`` reads a 16-bit scale out of a quantized byte buffer): the BITCAST loads the
    integer (``casts.bitcast``). Ungated, no store or loop boundary between."""
    out = set()
    for u in k.lines(Ops.BITCAST):
        s = u.src[0]
        if (u.dtype.count == 1 and dtypes.is_unsigned(u.dtype) and s.op is Ops.LOAD and s.dtype.scalar() is dtypes.uint8
                and s.dtype.count == u.dtype.itemsize and u.dtype.itemsize in (2, 4, 8) and len(s.src) == 1
                and len(s.src[0].src) == 2 and not is_reg_index(s.src[0]) and k.users.get(s, []) == [u]
                and k.no_barrier(s, u)):
            out.add(s)
    return frozenset(out)


def foldable(k: KernelLines, u: UOp) -> bool:
    """A float32/64 load from memory whose only user is a float op that can read it from memory,
    with no store, loop boundary or gate in between: the user reads memory instead of a register."""
    if u.op is not Ops.LOAD or u.dtype not in FOLDABLE_LOADS or len(u.src) != 1:
        return False
    idx = u.src[0]
    if len(idx.src) != 2 or is_reg_index(idx):
        return False
    users = k.users.get(u, [])
    if len(users) != 1:
        return False
    user = users[0]
    if user.dtype.count != 1 or user.dtype is not u.dtype or user.op not in FOLD_OPS:
        return False
    if user.src[1] is not u and not (user.op in ADD_MUL and user.src[0] is u and
                                      user.src[1].op is not Ops.CONST and user.src[1].op is not Ops.LOAD):
        return False
    return k.no_barrier(u, user)


def vfoldable(k: KernelLines, vconst: Callable[[UOp], bool], u: UOp) -> bool:
    """A vector load whose only user reads it as operand 2 (a memory operand) of one instruction."""
    sdt = scalar_of(u.dtype)
    if sdt not in BROADCASTABLE or len(u.src) != 1 or len(u.src[0].src) != 2 or u.dtype.count * esize(sdt) < 16:
        return False
    users = k.users.get(u, [])
    if len(users) != 1:
        return False
    user = users[0]
    if user.dtype is not u.dtype or user.op not in VFOLD_OPS or (user.op is Ops.MUL and kind(sdt) == "i64") \
            or (user.op is Ops.MAX and not dtypes.is_float(sdt)):
        return False
    if user.src[1] is not u and not (user.op in COMMUTATIVE and user.src[0] is u
                                      and not vconst(user.src[1]) and user.src[1].op is not Ops.LOAD):
        return False
    if user.src[0] is user.src[1]:
        return False
    return k.no_barrier(u, user)


def plan_flag_compares(k: KernelLines) -> frozenset[UOp]:
    """The comparisons whose only users read their flags (or mask) instead of a bool: WHEREs, and gates of loads
    and stores that pick their address on them. No bool is made; each user asks ``flags.compare``, which shares one
    cmp among them while the flags hold."""
    out = set()
    for c in k.lines(CMP_OPS):
        users = k.users.get(c, [])
        if users and all(reads_flags(x, c) for x in users):
            out.add(c)
    return frozenset(out)


def reads_flags(x: UOp, c: UOp) -> bool:
    """Does line ``x`` read comparison ``c`` as flags (a WHERE choosing on it, a gate picking an address on it)?"""
    if x.op is Ops.WHERE:
        return x.src[0] is c and x.src[1] is not c and x.src[2] is not c and where_fuses(x.dtype, c)
    return x.op is Ops.INDEX and len(x.src) > 2 and x.src[2] is c and c not in x.src[:2] and gate_fuses(c)


def gate_fuses(c: UOp) -> bool:
    """Can a gate pick its address on comparison ``c``'s flags with one cmov (not float ==/!=: ZF and PF)?"""
    return c.op in CMP_OPS and c.dtype.count == 1 and (c.op is Ops.CMPLT or not is_vec(c.src[0].dtype))


def where_fuses(dt: DType, c: UOp) -> bool:
    """Can a WHERE of ``dt`` use comparison ``c`` directly (flags for gprs, a vcmp mask for floats)?"""
    if c.op not in CMP_OPS:
        return False
    if not is_vec(dt):
        return True
    return is_vec(c.src[0].dtype) and (c.src[0].dtype is dtypes.float64) == (dt is dtypes.float64)
