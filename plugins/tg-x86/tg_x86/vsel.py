"""Vector instruction selection: the vector UOps upcast makes -> AVX2 instructions on ymm pieces.

In:  vector UOps of a linear kernel (``dtype.count > 1``): VECTORIZE, GEP, VCONST and vector CONST,
     vector LOAD/STORE from a scalar pointer INDEX (consecutive elements), ALU ops, casts,
     comparisons and WHERE, vector accumulators (DEFINE_REG with a vector base).
Out: machine instructions appended by the ``Selector`` this class is mixed into; a vector value's
     entry in ``Selector.val`` is a tuple of pieces (virtual vec registers).

Legalization (wide vectors): a vector of n lanes is held as pieces of at most 8 lanes (32-bit
types and bool) or 4 lanes (64-bit types), one ymm register each (an xmm when the piece fits in
16 bytes); every op works piece by piece, so 16- and 32-lane vectors become 2 or 4 native ops.
bool lanes are 32-bit 0/1 integers (8 per piece; masks are made from them with a shift).

Constants (vector CONST, VCONST, VECTORIZE of CONSTs) are never held in registers: they are
frame slots read as memory operands, or loaded at the use that needs a register. Scalar loads
feeding only a broadcast are folded into it (``vbroadcastss ymm, [mem]``); single-use vector
loads fold into the memory operand of their ALU user; ``a*b + c`` on float vectors is one FMA where
``isel.Selector.plan_fma`` fused it (an accumulator update ``acc + a*b`` is a ``vfmadd231`` into the
accumulator).

Anything without a vector rule here is scalarized lane by lane (lanes extracted, the scalar
rules of ``isel`` applied, the results packed again): correct first. float -> int casts take the
vector path and branch to the scalar rules only when a lane is out of range (the wrap semantics).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg_x86.facts import KernelFacts, define_reg, is_reg_index
from tg_x86.isa import Cond, Op
from tg_x86.lanes import (
    _DTYPE,
    BROADCASTABLE,
    CMP_EQ_OQ,
    CMP_LT_OS,
    CMP_NEQ_UQ,
    CMP_UNORD_Q,
    COMMUTATIVE,
    DIV_OPS,
    HRED,
    HRED_OPS,
    SHIFT_OPS,
    TRUNC_IMM,
    VALU,
    VCMP_OPS,
    VECTOR_DTYPES,
    VFOLD_OPS,
    const_lanes,
    esize,
    is_vector,
    kind,
    lane_by_lane,
    lane_bytes,
    lanes_per_piece,
    native,
    pbits,
    piece_bits,
    piece_lanes,
    scalar_of,
    shuffle_plan,
    uniform,
    vector_layout,
)
from tg_x86.machine import VMem
from tg_x86.operands import Label
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, dtypes
from tgcore.uop import GroupOp, Ops, PatternMatcher, UOp, UPat


class VectorSelection:
    """Mixed into ``isel.Selector``: what the vector rules (``VECTOR_ISEL``) call."""
    # provided by Selector (with emit, new, copy, mem, reg, materialize, load_into, select_line, jump, ...)
    facts: KernelFacts   # the kernel's analysis (``facts.analyze``): never changed
    users: dict[UOp, list[UOp]]
    val: dict[UOp, Any]
    folded: set[UOp]
    loops: list
    fma_order: Callable[..., tuple[str, UOp, UOp, UOp]]

    def shuffle(self, plan: list[tuple], dt: DType) -> tuple[VReg, ...]:
        """The pieces ``shuffle_plan`` planned: one vshufps/vshufpd each."""
        out = []
        for (op, (a, pa), (b, pb), imm), n in zip(plan, piece_lanes(dt), strict=True):
            d = self.vnew()
            self.vemit(op, d, [self.vpiece(a, pa), self.voperand(b, pb)], pbits(n, dt.scalar()), (("i", imm),))
            out.append(d)
        return tuple(out)

    def hreduce(self, u: UOp) -> Any:
        v, op, sdt = self.facts.hred_roots[u], u.op, u.dtype
        k = kind(sdt)

        def combine(a: VReg, b: VReg, bits: int) -> VReg:
            d = self.vnew()
            if op is Ops.MAX and k in ("f32", "f64"):
                pd = k == "f64"
                t, m = self.vnew(), self.vnew()
                self.vemit(Op.VMAXPD if pd else Op.VMAXPS, t, [a, b], bits)
                self.vemit(Op.VCMPPD if pd else Op.VCMPPS, m, [a, a], bits, (("i", CMP_UNORD_Q),))
                self.vemit(Op.VBLENDVPD if pd else Op.VBLENDVPS, d, [t, a, m], bits)
            else:
                xop = HRED[(op, k)]
                if xop is Op.VPMAXSD and dtypes.is_unsigned(sdt):
                    xop = Op.VPMAXUD
                self.vemit(xop, d, [a, b], bits)
            return d
        counts = piece_lanes(v.dtype)
        bits = pbits(counts[0], sdt)
        acc = self.vpiece(v, 0)
        for p in range(1, len(counts)):
            acc = combine(acc, self.vpiece(v, p), bits)
        if bits == 256:
            acc = combine(acc, self.upper(acc), 128)
        if esize(sdt) == 4:
            t = self.vnew()
            self.emit(Op.VMOVHLPS, [t], [acc, acc], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
            acc = combine(acc, t, 128)
            t = self.vnew()
            self.emit(Op.VPERMILPS, [t], [acc], (("d", 0, 128), ("u", 0, 128), ("i", 1)))
        else:
            t = self.vnew()
            self.emit(Op.VMOVHLPS, [t], [acc, acc], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
        acc = combine(acc, t, 128)
        if k in ("f32", "f64"):
            return acc
        d = self.new("gpr")
        wide = esize(sdt) == 8
        self.emit(Op.VMOVQ if wide else Op.VMOVD, [d], [acc], (("d", 0, 64 if wide else 32), ("u", 0, 128)))
        return d

    # ---- emission helpers ----
    def vnew(self) -> VReg:
        return self.new("vec")

    def vemit(self, op: Op, d: Any, uses: list, bits: int, extra: tuple = ()) -> None:
        """``d = op(uses...)``, every register at ``bits``; a VMem use becomes a memory operand."""
        self.emit(op, [d], uses, vector_layout((bits, tuple(map(type, uses)))) + extra)

    def zero(self, bits: int) -> VReg:
        d = self.vnew()
        self.emit(Op.VXORPS, [d], [], (("d", 0, bits), ("d", 0, bits), ("d", 0, bits)))
        return d

    def upper(self, x: VReg) -> VReg:
        """The high 128 bits of a ymm register, as an xmm."""
        d = self.vnew()
        self.emit(Op.VEXTRACTF128, [d], [x], (("d", 0, 128), ("u", 0, 256), ("i", 1)))
        return d

    def join(self, lo: VReg, hi: VReg) -> VReg:
        d = self.vnew()
        self.emit(Op.VINSERTF128, [d], [lo, hi], (("d", 0, 256), ("u", 0, 256), ("u", 1, 128), ("i", 1)))
        return d

    def vcopy(self, x: VReg) -> VReg:
        d = self.new(x.cls)
        self.copy(d, x)
        return d

    def const_piece(self, u: UOp, p: int) -> VMem:
        hit = self.const_pieces.get((u, p))
        if hit is None:
            hit = self.const_pieces[(u, p)] = self._const_piece(u, p)
        return hit

    def _const_piece(self, u: UOp, p: int) -> VMem:
        sdt = scalar_of(u.dtype)
        per = lanes_per_piece(sdt)
        value = uniform(u)
        if value is not None:
            n = min(per, u.dtype.count - p * per)
            return self.const_mem(lane_bytes(value, sdt) * n, pbits(n, sdt))
        lanes = const_lanes(u)[p * per:(p + 1) * per]
        data = b"".join(lane_bytes(v, sdt) for v in lanes)
        return self.const_mem(data, pbits(len(lanes), sdt))

    def splat(self, value: Any, sdt: DType, bits: int) -> VMem:
        """A constant with every lane ``value``, as a memory operand of ``bits``."""
        n = bits // 8 // esize(sdt)
        return self.const_mem(lane_bytes(value, sdt) * n, bits)

    # ---- operands ----
    def vpiece(self, u: UOp, p: int, into: VReg | None = None) -> VReg:
        """Piece ``p`` of vector ``u`` in a register (constants and folded loads are loaded here)."""
        held = self.val.get(u)   # most pieces are values selected before (constants and folded loads have none)
        if held is not None:
            if into is not None:
                self.copy(into, held[p])
                return into
            return held[p]
        sdt = scalar_of(u.dtype)
        const = self.facts.is_vconst(u)
        if not const and u not in self.folded and u not in self.facts.bcast_loads:
            raise KeyError(f"x86: no value for {u.op.name} {u.dtype}")
        if not native(sdt):   # a constant held lane by lane
            return self.materialize(UOp.const(sdt, const_lanes(u)[p]), into)
        bits = piece_bits(u.dtype)[p]
        d = into or self.vnew()
        if not const:
            self.load_piece(d, u, p)
        elif self.facts.is_vzero(u):
            self.emit(Op.VXORPS, [d], [], (("d", 0, bits), ("d", 0, bits), ("d", 0, bits)))
        else:
            self.vemit(Op.VMOVUPS, d, [self.const_piece(u, p)], bits)
        return d

    def voperand(self, u: UOp, p: int) -> Any:
        """Piece ``p`` as a register or, for constants and folded loads, a memory operand."""
        held = self.val.get(u)   # constants and folded loads have no value
        if held is not None:
            return held[p]
        if self.facts.is_vconst(u):
            return self.const_piece(u, p)
        if u in self.folded:
            return self.piece_mem(u, p)
        raise KeyError(f"x86: no value for {u.op.name} {u.dtype}")

    def pieces(self, u: UOp) -> tuple[VReg, ...]:
        return tuple(self.vpiece(u, p) for p in range(len(piece_lanes(u.dtype))))

    def piece_mem(self, u: UOp, p: int) -> VMem:
        """Piece ``p`` of vector load ``u`` as a memory operand."""
        sdt = scalar_of(u.dtype)
        m: VMem = self.mem(u.src[0], pbits(piece_lanes(u.dtype)[p], sdt))
        return VMem(m.bits, m.base, m.index, m.scale, m.disp + p * lanes_per_piece(sdt) * sdt.itemsize, m.slot)

    # ---- lanes ----
    def lane_key(self, *key: Any) -> tuple:
        top = self.loops[-1][2] if self.loops else None
        return (*key, top)

    def extract(self, u: UOp, j: int) -> Any:
        """Lane ``j`` of vector ``u`` as a scalar value (the scalar rules' representation)."""
        sdt = scalar_of(u.dtype)
        if self.facts.is_vconst(u):
            return self.materialize(UOp.const(sdt, const_lanes(u)[j]))
        if u.op is Ops.VECTORIZE and u.src[j] not in self.facts.bcast_loads:
            return self.reg(u.src[j])
        if not native(sdt):
            return self.val[u][j]
        key = self.lane_key(u, j)
        if self.lane_cache is not None and key in self.lane_cache:
            return self.lane_cache[key]
        per = lanes_per_piece(sdt)
        p, k = divmod(j, per)
        half_lanes = 16 // esize(sdt)
        h, kk = divmod(k, half_lanes)
        x = self.half(u, p, h)
        if dtypes.is_float(sdt):
            if kk == 0:
                d = self.vcopy(x)
            else:
                d = self.vnew()
                if sdt is dtypes.float64:
                    self.emit(Op.VMOVHLPS, [d], [x, x], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
                else:
                    self.emit(Op.VPERMILPS, [d], [x], (("d", 0, 128), ("u", 0, 128), ("i", kk)))
        else:
            d = self.new("gpr")
            gb = 64 if esize(sdt) == 8 else 32
            if kk == 0:
                self.emit(Op.VMOVQ if gb == 64 else Op.VMOVD, [d], [x], (("d", 0, gb), ("u", 0, 128)))
            else:
                self.emit(Op.VPEXTRQ if gb == 64 else Op.VPEXTRD, [d], [x],
                          (("d", 0, gb), ("u", 0, 128), ("i", kk)))
        if self.lane_cache is not None:
            self.lane_cache[key] = d
        return d

    def half(self, u: UOp, p: int, h: int) -> VReg:
        """The 128-bit half ``h`` of piece ``p`` of ``u`` (half 0 is the piece register itself)."""
        key = self.lane_key(u, p, "half", h)
        if self.lane_cache is not None and key in self.lane_cache:
            return self.lane_cache[key]
        x = self.vpiece(u, p)
        if h:
            x = self.upper(x)
        if self.lane_cache is not None:
            self.lane_cache[key] = x
        return x

    def slice128(self, u: UOp, start: int) -> VReg:
        """An xmm holding lanes ``start..`` of ``u`` (``start`` on a 128-bit boundary)."""
        sdt = scalar_of(u.dtype)
        p, k = divmod(start, lanes_per_piece(sdt))
        return self.half(u, p, k // (16 // esize(sdt)))

    def pack(self, sdt: DType, regs: list) -> tuple[VReg, ...]:
        """Scalar values (the scalar rules' representation) -> pieces."""
        if not native(sdt):
            return tuple(regs)
        if all(r is regs[0] for r in regs):
            return self.broadcast_reg(sdt, regs[0], len(regs))
        per, half = lanes_per_piece(sdt), 16 // esize(sdt)
        out = []
        for start in range(0, len(regs), per):
            chunk = regs[start:start + per]
            xs = [self.pack128(sdt, chunk[i:i + half]) for i in range(0, len(chunk), half)]
            out.append(xs[0] if len(xs) == 1 else self.join(xs[0], xs[1]))
        return tuple(out)

    def pack128(self, sdt: DType, regs: list) -> VReg:
        d = self.vnew()
        if dtypes.is_float(sdt):
            if sdt is dtypes.float64:
                if len(regs) == 1:
                    self.copy(d, regs[0])
                else:
                    self.emit(Op.VMOVLHPS, [d], regs, (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
                return d
            self.copy(d, regs[0])
            for k, r in enumerate(regs[1:], 1):
                t = self.vnew()
                self.emit(Op.VINSERTPS, [t], [d, r], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128), ("i", k << 4)))
                d = t
            return d
        gb = 64 if esize(sdt) == 8 else 32
        self.emit(Op.VMOVQ if gb == 64 else Op.VMOVD, [d], [regs[0]], (("d", 0, 128), ("u", 0, gb)))
        for k, r in enumerate(regs[1:], 1):
            t = self.vnew()
            self.emit(Op.VPINSRQ if gb == 64 else Op.VPINSRD, [t], [d, r],
                      (("d", 0, 128), ("u", 0, 128), ("u", 1, gb), ("i", k)))
            d = t
        return d

    def broadcast_reg(self, sdt: DType, r: Any, count: int) -> tuple[VReg, ...]:
        """Every lane the scalar value ``r``: one register shared by all pieces."""
        counts = piece_lanes(sdt.vec(count))
        bits = pbits(counts[0], sdt)
        d = self.vnew()
        if sdt is dtypes.float32:
            self.emit(Op.VBROADCASTSS, [d], [r], (("d", 0, bits), ("u", 0, 128)))
        elif sdt is dtypes.float64:
            if bits == 256:
                self.emit(Op.VBROADCASTSD, [d], [r], (("d", 0, 256), ("u", 0, 128)))
            else:
                self.emit(Op.VMOVLHPS, [d], [r, r], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
        else:
            t = self.vnew()
            wide = esize(sdt) == 8
            self.emit(Op.VMOVQ if wide else Op.VMOVD, [t], [r], (("d", 0, 128), ("u", 0, 64 if wide else 32)))
            self.emit(Op.VPBROADCASTQ if wide else Op.VPBROADCASTD, [d], [t], (("d", 0, bits), ("u", 0, 128)))
        return (d,) * len(counts)

    # ---- the vector rule of each op (see VECTOR_ISEL) ----
    def vdefine_reg(self, u: UOp) -> None:
        base = u.dtype.base
        if native(base):
            self.val[u] = tuple(self.vnew() for _ in piece_lanes(base))
        else:
            self.val[u] = tuple(self.newv(base.scalar()) for _ in range(base.count))

    def vcompare(self, u: UOp) -> None:
        if u not in self.facts.vfused_cmps:
            self.vcompare_bool(u)

    def vbitcast(self, u: UOp) -> None:
        src = u.src[0]
        s, t = scalar_of(src.dtype), scalar_of(u.dtype)
        if native(s) and native(t) and s.itemsize == t.itemsize and s is not dtypes.bool:
            self.val[u] = tuple(self.vcopy(r) for r in self.pieces(src))
        else:
            self.scalarize(u)

    def gep(self, u: UOp) -> None:
        v, lanes = u.src[0], u.arg
        if len(lanes) == 1:
            if u not in self.facts.shuffled_lanes:  # else only shuffled VECTORIZEs read it: nothing to extract
                self.val[u] = self.extract(v, lanes[0])
            return
        sdt = scalar_of(v.dtype)
        per = lanes_per_piece(sdt)
        start, n = lanes[0], len(lanes)
        if not native(sdt):
            self.val[u] = tuple(self.extract(v, j) for j in lanes)
        elif tuple(lanes) == tuple(range(start, start + n)) and start % per == 0 and n == per:
            self.val[u] = (self.vcopy(self.vpiece(v, start // per)),)
        elif tuple(lanes) == tuple(range(start, start + n)) and n * esize(sdt) == 16 and start % n == 0:
            self.val[u] = (self.vcopy(self.slice128(v, start)),)
        else:
            plan = shuffle_plan(u.dtype, [(v, j) for j in lanes])
            if plan is not None:
                self.val[u] = self.shuffle(plan, u.dtype)
            else:
                self.val[u] = self.pack(sdt, [self.extract(v, j) for j in lanes])

    def vectorize(self, u: UOp) -> None:
        if self.facts.is_vconst(u):
            return
        if not native(u.dtype):
            self.val[u] = tuple(self.reg(x) for x in u.src)
            return
        sdt = scalar_of(u.dtype)
        s = u.src[0]
        if all(x is s for x in u.src) and s in self.facts.bcast_loads:
            counts = piece_lanes(u.dtype)
            bits = pbits(counts[0], sdt)
            d = self.vnew()
            m = self.mem(s.src[0], esize(sdt) * 8)
            if sdt is dtypes.float64 and bits == 128:
                t = self.vnew()
                self.emit(Op.VMOVSD, [t], [m], (("d", 0, 128), ("u", 0, None)))
                self.emit(Op.VMOVLHPS, [d], [t, t], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
            else:
                bop = {dtypes.float32: Op.VBROADCASTSS, dtypes.float64: Op.VBROADCASTSD}.get(
                    sdt, Op.VPBROADCASTQ if esize(sdt) == 8 else Op.VPBROADCASTD)
                self.emit(bop, [d], [m], (("d", 0, bits), ("u", 0, None)))
            self.val[u] = (d,) * len(counts)
            return
        plan = self.facts.shuffles.get(u)
        if plan is not None:
            self.val[u] = self.shuffle(plan, u.dtype)
            return
        self.val[u] = self.pack(sdt, [self.reg(x) for x in u.src])

    # ---- memory ----
    def vfoldable(self, u: UOp) -> bool:
        """A vector load whose only user reads it as operand 2 (a memory operand) of one instruction."""
        sdt = scalar_of(u.dtype)
        if sdt not in BROADCASTABLE or len(u.src) != 1 or len(u.src[0].src) != 2 or u.dtype.count * esize(sdt) < 16:
            return False
        users = self.users.get(u, [])
        if len(users) != 1:
            return False
        user = users[0]
        if user.dtype is not u.dtype or user.op not in VFOLD_OPS or (user.op is Ops.MUL and kind(sdt) == "i64") \
                or (user.op is Ops.MAX and not dtypes.is_float(sdt)):
            return False
        if user.src[1] is not u and not (user.op in COMMUTATIVE and user.src[0] is u
                                          and not self.facts.is_vconst(user.src[1]) and user.src[1].op is not Ops.LOAD):
            return False
        if user.src[0] is user.src[1]:
            return False
        return self.facts.no_barrier(u, user)

    def load_piece(self, d: VReg, u: UOp, p: int, where: VMem | None = None) -> None:
        """Load piece ``p`` of vector load ``u`` into ``d`` (from ``where`` and on when given: a gated load)."""
        idx, sdt = u.src[0], scalar_of(u.dtype)
        if u in self.facts.bcast_loads:  # a broadcast source asked for as a register: the scalar load
            self.load_into(d, idx, sdt)
            return
        n = piece_lanes(u.dtype)[p]
        per = lanes_per_piece(sdt)
        m: VMem = self.mem(idx, 8) if where is None else where
        disp = m.disp + p * per * sdt.itemsize

        def at(bits: int | None, extra: int = 0) -> VMem:
            return VMem(bits, m.base, m.index, m.scale, disp + extra, m.slot)
        if sdt is dtypes.bool:
            if n in (4, 8):
                self.emit(Op.VPMOVZXBD, [d], [at(n * 8)], (("d", 0, 256 if n == 8 else 128), ("u", 0, None)))
                return
            regs = []
            for k in range(n):
                t = self.new("gpr")
                self.emit(Op.MOVZX, [t], [at(8, k)], (("d", 0, 32), ("u", 0, None)))
                regs.append(t)
            self.copy(d, self.pack128(sdt, regs))
            return
        nbytes = n * sdt.itemsize
        if nbytes >= 16:
            self.emit(Op.VMOVUPS, [d], [at(nbytes * 8)], (("d", 0, nbytes * 8), ("u", 0, None)))
        elif nbytes == 8:
            self.emit(Op.VMOVSD, [d], [at(64)], (("d", 0, 128), ("u", 0, None)))
        else:
            self.emit(Op.VMOVSS, [d], [at(32)], (("d", 0, 128), ("u", 0, None)))

    def vload(self, u: UOp) -> None:
        idx = u.src[0]
        if is_reg_index(idx):
            acc = self.val[idx.src[0]]
            self.val[u] = acc if self.alias_ok(u) else tuple(self.vcopy(r) for r in acc)
            return
        if not native(u.dtype):
            out = []
            for j in range(u.dtype.count):
                su = UOp(Ops.LOAD, scalar_of(u.dtype), (idx, *(self.lane_uop(s, j) for s in u.src[1:])))
                self.lane_offset = j
                self.select_line(su)
                self.lane_offset = 0
                out.append(self.val[su])
            self.val[u] = tuple(out)
            return
        if self.vfoldable(u):
            self.folded.add(u)
            return
        counts = piece_lanes(u.dtype)
        gate = idx.src[2] if len(idx.src) > 2 else None
        out = tuple(self.vnew() for _ in counts)
        if gate is None:
            for p, d in enumerate(out):
                self.load_piece(d, u, p)
        elif len(u.src) == 1:  # every piece through the gated address: the buffer's elements or the zero slot
            m = self.gated_mem(gate, idx, u.dtype.itemsize, store=False)
            for p, d in enumerate(out):
                self.load_piece(d, u, p, m)
        else:  # an alternative value (hand-written programs only): kept by jumping over the loads
            for p, d in enumerate(out):
                self.vpiece(u.src[1], p, into=d)
            skip = Label("gated")
            self.jump(skip, self.gate_off(gate))
            for p, d in enumerate(out):
                self.load_piece(d, u, p)
            self.label(skip)
        self.val[u] = out

    def vstore(self, u: UOp) -> None:
        idx, value = u.src[0], u.src[1]
        if is_reg_index(idx):
            acc = self.val[define_reg(idx)]
            for p, r in enumerate(acc):
                self.vpiece(value, p, into=r)
            return
        if not native(value.dtype):
            for j in range(value.dtype.count):
                self.lane_offset = j
                self.select_line(UOp(Ops.STORE, dtypes.void, (idx, self.lane_uop(value, j))))
                self.lane_offset = 0
            return
        gate = idx.src[2] if len(idx.src) > 2 else None
        regs = self.pieces(value)
        sdt = scalar_of(value.dtype)
        per = lanes_per_piece(sdt)
        if gate is None:
            m: VMem = self.mem(idx, 8)
        else:   # every piece through the gated address: the buffer's elements or the sink
            m = self.gated_mem(gate, idx, value.dtype.itemsize, store=True)
        for p, (r, n) in enumerate(zip(regs, piece_lanes(value.dtype), strict=True)):
            disp = m.disp + p * per * sdt.itemsize

            def at(bits: int | None, extra: int = 0, disp: int = disp) -> VMem:
                return VMem(bits, m.base, m.index, m.scale, disp + extra, m.slot)
            if sdt is dtypes.bool:
                if n in (4, 8):
                    hi = self.upper(r) if n == 8 else r
                    w, b = self.vnew(), self.vnew()
                    self.vemit(Op.VPACKUSDW, w, [r, hi], 128)
                    self.vemit(Op.VPACKUSWB, b, [w, w], 128)
                    self.emit(Op.VMOVQ if n == 8 else Op.VMOVD, [], [at(n * 8), b], (("u", 0, None), ("u", 1, 128)))
                else:
                    for k in range(n):
                        t = self.extract_piece_lane(r, sdt, k)
                        self.emit(Op.MOV, [], [at(8, k), t], (("u", 0, None), ("u", 1, 8)))
                continue
            nbytes = n * sdt.itemsize
            if nbytes >= 16:
                self.emit(Op.VMOVUPS, [], [at(nbytes * 8), r], (("u", 0, None), ("u", 1, nbytes * 8)))
            elif nbytes == 8:
                self.emit(Op.VMOVSD, [], [at(64), r], (("u", 0, None), ("u", 1, 128)))
            else:
                self.emit(Op.VMOVSS, [], [at(32), r], (("u", 0, None), ("u", 1, 128)))

    def extract_piece_lane(self, r: VReg, sdt: DType, k: int) -> VReg:
        """Lane k (< 4) of a 32-bit integer piece register into a gpr."""
        d = self.new("gpr")
        if k == 0:
            self.emit(Op.VMOVD, [d], [r], (("d", 0, 32), ("u", 0, 128)))
        else:
            self.emit(Op.VPEXTRD, [d], [r], (("d", 0, 32), ("u", 0, 128), ("i", k)))
        return d

    # ---- scalarization ----
    def lane_uop(self, s: UOp, j: int) -> UOp:
        if not is_vector(s.dtype):
            return s
        sdt = scalar_of(s.dtype)
        if self.facts.is_vconst(s):
            return UOp.const(sdt, const_lanes(s)[j])
        if s.op is Ops.VECTORIZE and s.src[j] not in self.facts.bcast_loads:
            return s.src[j]
        g = UOp(Ops.GEP, sdt, (s,), (j,))
        self.val[g] = self.extract(s, j)
        return g

    def scalar_lanes(self, u: UOp) -> list:
        out = []
        sdt = scalar_of(u.dtype)
        for j in range(u.dtype.count):
            su = UOp(u.op, sdt, tuple(self.lane_uop(s, j) for s in u.src), u.arg)
            self.select_line(su)
            out.append(self.val[su])
        return out

    def scalarize(self, u: UOp) -> None:
        """No vector rule: the scalar rules lane by lane, then packed."""
        self.val[u] = self.pack(scalar_of(u.dtype), self.scalar_lanes(u))

    # ---- ALU ----
    def per_piece(self, u: UOp, fn: Any) -> None:
        """u's value: ``fn(d, p, bits)`` writes each piece p into a new register d of ``bits``."""
        out = []
        for p, bits in enumerate(piece_bits(u.dtype)):
            d = self.new("vec")
            fn(d, p, bits)
            out.append(d)
        self.val[u] = tuple(out)

    def vin_memory(self, x: UOp) -> bool:
        """Is a vector read as a memory operand (a constant's frame slots, a folded load)? Neither has a value."""
        return x not in self.val and (self.facts.is_vconst(x) or x in self.folded)

    def binary(self, xop: Op, u: UOp, a: UOp, b: UOp) -> None:
        """``d = a xop b`` piece by piece (per_piece written out: the most common vector op)."""
        in_memory = self.vin_memory
        if u.op in COMMUTATIVE and in_memory(a) and not in_memory(b):
            a, b = b, a
        out = []
        for p, bits in enumerate(piece_bits(u.dtype)):
            d = self.new("vec")
            self.vemit(xop, d, [self.vpiece(a, p), self.voperand(b, p)], bits)
            out.append(d)
        self.val[u] = tuple(out)

    def valu(self, u: UOp) -> None:
        if u in self.facts.fma_muls:   # its FMA is selected at the ADD
            return
        op, sdt = u.op, scalar_of(u.dtype)
        k = kind(sdt)
        if not native(u.dtype) or any(map(lane_by_lane, map(_DTYPE, u.src))):
            self.scalarize(u)
            return
        fused = self.facts.fma_adds.get(u)
        if fused is not None:
            c, mul = fused
            a, b = mul.src
            self.vfma(u, a, b, c, mul)
            return
        xop = VALU.get((op, k))
        if xop is not None:
            self.binary(xop, u, *u.src)
            return
        fl = k in ("f32", "f64")
        pd = k == "f64"
        if fl and op is Ops.MAX:  # (a != a || a > b) ? a : b
            a, b = u.src

            def vmax(d: VReg, p: int, bits: int) -> None:
                ra, t, m = self.vpiece(a, p), self.vnew(), self.vnew()
                self.vemit(Op.VMAXPD if pd else Op.VMAXPS, t, [ra, self.voperand(b, p)], bits)
                self.vemit(Op.VCMPPD if pd else Op.VCMPPS, m, [ra, ra], bits, (("i", CMP_UNORD_Q),))
                self.vemit(Op.VBLENDVPD if pd else Op.VBLENDVPS, d, [t, ra, m], bits)
            self.per_piece(u, vmax)
        elif fl and op is Ops.NEG:
            sign = -0.0
            self.per_piece(u, lambda d, p, bits: self.vemit(Op.VXORPS, d, [self.vpiece(u.src[0], p),
                                                                         self.splat(sign, sdt, bits)], bits))
        elif fl and op is Ops.SQRT:
            self.per_piece(u, lambda d, p, bits: self.vemit(Op.VSQRTPD if pd else Op.VSQRTPS, d,
                                                            [self.voperand(u.src[0], p)], bits))
        elif fl and op is Ops.RECIPROCAL:
            def recip(d: VReg, p: int, bits: int) -> None:
                one = self.vnew()
                self.vemit(Op.VMOVUPS, one, [self.splat(1.0, sdt, bits)], bits)
                self.vemit(Op.VDIVPD if pd else Op.VDIVPS, d, [one, self.voperand(u.src[0], p)], bits)
            self.per_piece(u, recip)
        elif fl and op is Ops.TRUNC:
            self.per_piece(u, lambda d, p, bits: self.vemit(Op.VROUNDPD if pd else Op.VROUNDPS, d,
                                                            [self.voperand(u.src[0], p)], bits, (("i", TRUNC_IMM),)))
        elif fl and op is Ops.MULACC:
            a, b, c = u.src
            self.vfma(u, a, b, c, u)
        elif k == "i32" and op is Ops.MAX:
            self.binary(Op.VPMAXUD if dtypes.is_unsigned(sdt) else Op.VPMAXSD, u, *u.src)
        elif k in ("i32", "i64") and op is Ops.NEG:
            sub = Op.VPSUBQ if k == "i64" else Op.VPSUBD
            self.per_piece(u, lambda d, p, bits: self.vemit(sub, d, [self.zero(bits), self.voperand(u.src[0], p)],
                                                            bits))
        elif k == "bool" and op is Ops.NEG:
            self.per_piece(u, lambda d, p, bits: self.vemit(Op.VPXOR, d, [self.vpiece(u.src[0], p),
                                                                        self.splat(1, dtypes.int32, bits)], bits))
        elif k in ("i32", "i64") and op in SHIFT_OPS:
            self.vshift(u)
        elif k == "i32" and op in DIV_OPS:
            self.vdivide(u)
        else:
            self.scalarize(u)

    def vfma(self, u: UOp, a: UOp, b: UOp, c: UOp, mul: UOp) -> None:
        """a*b + c rounded once, piece by piece: one vfmadd{132,213,231}p[sd] of the form ``fma_order`` picks."""
        form, x, y, z = self.fma_order(a, b, c, mul, u, self.vin_memory)
        fma = Op["VFMADD" + form + ("PD" if esize(scalar_of(u.dtype)) == 8 else "PS")]

        def emit_fma(d: VReg, p: int, bits: int) -> None:
            rz = self.voperand(z, p)
            self.emit(fma, [d], [self.vpiece(x, p), self.vpiece(y, p), rz],
                      (("d", 0, bits), ("u", 1, bits), ("u", 2, None if isinstance(rz, VMem) else bits)), two=True)
        self.per_piece(u, emit_fma)

    def vdivide(self, u: UOp) -> None:
        """int32 division and remainder. Unsigned by a power of two: a shift or a mask. Signed: through
        float64, which is exact here (operands below 2**31: a quotient never rounds across an integer);
        INT_MIN/-1 wraps by itself (vcvttpd2dq gives 0x80000000), lanes dividing by 0 are masked to 0."""
        a, b = u.src
        sdt = scalar_of(u.dtype)
        lanes = const_lanes(b) if self.facts.is_vconst(b) else None
        d0 = int(lanes[0]) if lanes is not None and all(x == lanes[0] for x in lanes) else None
        if dtypes.is_unsigned(sdt):
            if d0 is None or d0 <= 0 or d0 & (d0 - 1):
                self.scalarize(u)
            elif u.op is Ops.IDIV:
                k = d0.bit_length() - 1
                self.per_piece(u, lambda d, p, bits: self.emit(Op.VPSRLD, [d], [self.vpiece(a, p)],
                                                               (("d", 0, bits), ("u", 0, bits), ("i", k))))
            else:
                self.per_piece(u, lambda d, p, bits: self.vemit(Op.VPAND, d, [self.vpiece(a, p),
                                                                            self.splat(d0 - 1, sdt, bits)], bits))
            return
        maybe_zero = d0 is None or d0 == 0

        def div(d: VReg, p: int, bits: int) -> None:
            n = piece_lanes(u.dtype)[p]
            ra, rb = self.vpiece(a, p), self.vpiece(b, p)
            halves = []
            for h in range(2 if bits == 256 else 1):
                xa = self.upper(ra) if h else ra
                xb = self.upper(rb) if h else rb
                fa, fb, fq, q = self.vnew(), self.vnew(), self.vnew(), self.vnew()
                wide = 256 if n > 2 else 128
                self.emit(Op.VCVTDQ2PD, [fa], [xa], (("d", 0, wide), ("u", 0, 128)))
                self.emit(Op.VCVTDQ2PD, [fb], [xb], (("d", 0, wide), ("u", 0, 128)))
                self.vemit(Op.VDIVPD, fq, [fa, fb], wide)
                self.emit(Op.VCVTTPD2DQ, [q], [fq], (("d", 0, 128), ("u", 0, wide)))
                halves.append(q)
            q = halves[0] if len(halves) == 1 else self.join(*halves)
            if u.op is Ops.MOD:
                t, r = self.vnew(), self.vnew()
                self.vemit(Op.VPMULLD, t, [q, rb], bits)
                self.vemit(Op.VPSUBD, r, [ra, t], bits)
                q = r
            if maybe_zero:
                z = self.vnew()
                self.vemit(Op.VPCMPEQD, z, [rb, self.zero(bits)], bits)
                self.vemit(Op.VPANDN, d, [z, q], bits)
            else:
                self.copy(d, q)
        self.per_piece(u, div)

    def vshift(self, u: UOp) -> None:
        """Shift amounts outside 0..width-1 give 0 or the sign: exactly what vpsllv/vpsrlv/vpsrav do."""
        sdt = scalar_of(u.dtype)
        a, n = u.src
        wide = esize(sdt) == 8
        signed = not dtypes.is_unsigned(sdt)
        if u.op is Ops.SHL:
            imm_op, var_op = (Op.VPSLLQ, Op.VPSLLVQ) if wide else (Op.VPSLLD, Op.VPSLLVD)
        elif not signed:
            imm_op, var_op = (Op.VPSRLQ, Op.VPSRLVQ) if wide else (Op.VPSRLD, Op.VPSRLVD)
        elif not wide:
            imm_op, var_op = Op.VPSRAD, Op.VPSRAVD
        else:
            self.scalarize(u)
            return
        lanes = const_lanes(n) if self.facts.is_vconst(n) else None
        if lanes is not None and all(x == lanes[0] for x in lanes) and 0 <= int(lanes[0]) < sdt.itemsize * 8:
            amount = int(lanes[0])
            self.per_piece(u, lambda d, p, bits: self.emit(imm_op, [d], [self.vpiece(a, p)],
                                                           (("d", 0, bits), ("u", 0, bits), ("i", amount))))
        elif scalar_of(n.dtype) is sdt or esize(scalar_of(n.dtype)) == esize(sdt):
            self.per_piece(u, lambda d, p, bits: self.vemit(var_op, d, [self.vpiece(a, p), self.voperand(n, p)], bits))
        else:
            self.scalarize(u)

    # ---- comparisons and WHERE ----
    def compare_masks(self, c: UOp) -> tuple[list[VReg], bool] | None:
        """All-ones lanes where comparison ``c`` holds, per piece of its sources; and whether the masks
        are inverted (hold where ``c`` is false). None when there is no vector compare for the dtype."""
        a, b = c.src
        sdt = scalar_of(a.dtype)
        k = kind(sdt)
        out: list[VReg] = []
        counts = piece_lanes(a.dtype)
        if k in ("f32", "f64"):
            pred = {Ops.CMPLT: CMP_LT_OS, Ops.CMPEQ: CMP_EQ_OQ, Ops.CMPNE: CMP_NEQ_UQ}[c.op]
            for p, n in enumerate(counts):
                m = self.vnew()
                self.vemit(Op.VCMPPD if k == "f64" else Op.VCMPPS, m, [self.vpiece(a, p), self.voperand(b, p)],
                           pbits(n, sdt), (("i", pred),))
                out.append(m)
            return out, False
        wide = k == "i64"
        eq, gt = (Op.VPCMPEQQ, Op.VPCMPGTQ) if wide else (Op.VPCMPEQD, Op.VPCMPGTD)
        for p, n in enumerate(counts):
            bits = pbits(n, sdt)
            m = self.vnew()
            if c.op is Ops.CMPEQ or c.op is Ops.CMPNE:
                self.vemit(eq, m, [self.vpiece(a, p), self.voperand(b, p)], bits)
            elif dtypes.is_unsigned(sdt):
                sign = self.splat(1 << (esize(sdt) * 8 - 1), sdt, bits)
                fa, fb = self.vnew(), self.vnew()
                self.vemit(Op.VPXOR, fa, [self.vpiece(a, p), sign], bits)
                self.vemit(Op.VPXOR, fb, [self.vpiece(b, p), sign], bits)
                self.vemit(gt, m, [fb, fa], bits)
            else:
                self.vemit(gt, m, [self.vpiece(b, p), self.voperand(a, p)], bits)
            out.append(m)
        return out, c.op is Ops.CMPNE

    def narrow_masks(self, masks: list[VReg], counts: tuple[int, ...]) -> list[VReg]:
        """64-bit lane masks (4 per piece) -> 32-bit lane masks (8 per piece)."""
        halves = []
        for m, n in zip(masks, counts, strict=True):
            if n > 2:
                d = self.vnew()
                self.vemit(Op.VSHUFPS, d, [m, self.upper(m)], 128, (("i", 0x88),))
            else:
                d = self.vnew()
                self.vemit(Op.VSHUFPS, d, [m, m], 128, (("i", 0x88),))
            halves.append(d)
        return [halves[i] if i + 1 >= len(halves) else self.join(halves[i], halves[i + 1])
                for i in range(0, len(halves), 2)]

    def vcompare_bool(self, c: UOp) -> None:
        if not native(c.src[0].dtype) or not native(c.src[1].dtype):
            self.scalarize(c)
            return
        masks, inverted = self.compare_masks(c)
        src = c.src[0].dtype
        if esize(src.scalar()) == 8:
            masks = self.narrow_masks(masks, piece_lanes(src))
        out = []
        for m, n in zip(masks, piece_lanes(c.dtype), strict=True):
            bits = pbits(n, dtypes.int32)
            d = self.vnew()
            if inverted:  # mask + 1: 0 where equal, 1 elsewhere
                self.vemit(Op.VPADDD, d, [m, self.splat(1, dtypes.int32, bits)], bits)
            else:
                self.emit(Op.VPSRLD, [d], [m], (("d", 0, bits), ("u", 0, bits), ("i", 31)))
            out.append(d)
        self.val[c] = tuple(out)

    def bool_mask(self, c: UOp, p: int, sdt: DType) -> VReg:
        """A blend mask (sign bit per lane) for piece ``p`` of a WHERE of ``sdt`` from bool vector ``c``."""
        if esize(sdt) == 4:
            n = piece_lanes(c.dtype)[p]
            d = self.vnew()
            b = pbits(n, dtypes.int32)
            self.emit(Op.VPSLLD, [d], [self.vpiece(c, p)], (("d", 0, b), ("u", 0, b), ("i", 31)))
            return d
        x = self.slice128(c, p * 4)
        t, d = self.vnew(), self.vnew()
        self.emit(Op.VPSLLD, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", 31)))
        lanes = min(4, c.dtype.count - 4 * p)
        self.emit(Op.VPMOVSXDQ, [d], [t], (("d", 0, 256 if lanes > 2 else 128), ("u", 0, 128)))
        return d

    def vwhere(self, u: UOp) -> None:
        c, x, y = u.src
        sdt = scalar_of(u.dtype)
        if not (native(u.dtype) and native(c.dtype) and native(x.dtype) and native(y.dtype)):
            self.scalarize(u)
            return
        blend = Op.VBLENDVPD if esize(sdt) == 8 else Op.VBLENDVPS
        if c in self.facts.vfused_cmps:
            res = self.compare_masks(c)
            assert res is not None
            masks, inverted = res
        else:
            masks, inverted = [self.bool_mask(c, p, sdt) for p in range(len(piece_lanes(u.dtype)))], False
        if inverted:
            x, y = y, x
        self.per_piece(u, lambda d, p, bits: self.vemit(blend, d, [self.vpiece(y, p), self.voperand(x, p), masks[p]],
                                                         bits))

    def vwhere_minmax(self, u: UOp, name: str) -> None:
        """``(p<q).where(a, b)`` with a, b the compared values: vminps/vmaxps (``isel.min_or_max``)."""
        _, a, b = u.src
        xop = Op[name + ("PD" if esize(scalar_of(u.dtype)) == 8 else "PS")]
        self.per_piece(u, lambda d, p, bits: self.vemit(xop, d, [self.vpiece(a, p), self.voperand(b, p)], bits))

    # ---- casts ----
    def vcast(self, u: UOp) -> None:
        src = u.src[0]
        s, t = scalar_of(src.dtype), scalar_of(u.dtype)
        ks, kt = kind(s), kind(t)
        if not (native(s) and native(t)):
            self.scalarize(u)
        elif s is t or (ks == kt and ks in ("i32", "i64")) or (ks == "bool" and kt == "i32"):
            self.val[u] = tuple(self.vcopy(r) for r in self.pieces(src))
        elif t is dtypes.bool:
            self.vto_bool(u)
        elif ks in ("i32", "bool") and kt == "f32" and (s is not dtypes.uint32):
            self.per_piece(u, lambda d, p, bits: self.vemit(Op.VCVTDQ2PS, d, [self.vpiece(src, p)], bits))
        elif ks in ("i32", "bool") and kt == "f64" and s is not dtypes.uint32:
            self.widen(u, Op.VCVTDQ2PD)
        elif ks == "f32" and kt == "f64":
            self.widen(u, Op.VCVTPS2PD)
        elif ks in ("i32", "bool") and kt == "i64":
            self.widen(u, Op.VPMOVSXDQ if s is dtypes.int32 else Op.VPMOVZXDQ)
        elif ks == "f64" and kt == "f32":
            self.narrow(u, lambda d, r, bits: self.emit(Op.VCVTPD2PS, [d], [r],
                                                        (("d", 0, 128), ("u", 0, bits))))
        elif ks == "i64" and kt == "i32":
            def low_dwords(d: VReg, r: VReg, bits: int) -> None:
                hi = self.upper(r) if bits == 256 else r
                self.vemit(Op.VSHUFPS, d, [r, hi], 128, (("i", 0x88),))
            self.narrow(u, low_dwords)
        elif ks in ("f32", "f64") and kt == "i32":
            self.float_to_i32(u)
        else:
            self.scalarize(u)

    def widen(self, u: UOp, op: Op) -> None:
        """32-bit lanes -> 64-bit lanes: output piece p reads the 128 bits at lane 4p."""
        src = u.src[0]
        self.per_piece(u, lambda d, p, bits: self.emit(op, [d], [self.slice128(src, 4 * p)],
                                                       (("d", 0, bits), ("u", 0, 128))))

    def narrow(self, u: UOp, fn: Any) -> None:
        """64-bit lanes -> 32-bit lanes: each source piece gives an xmm, two of them make a piece."""
        src = u.src[0]
        s = scalar_of(src.dtype)
        halves = []
        for p, n in enumerate(piece_lanes(src.dtype)):
            d = self.vnew()
            fn(d, self.vpiece(src, p), pbits(n, s))
            halves.append(d)
        self.val[u] = tuple(halves[i] if i + 1 >= len(halves) else self.join(halves[i], halves[i + 1])
                            for i in range(0, len(halves), 2))

    def vto_bool(self, u: UOp) -> None:
        src = u.src[0]
        s = scalar_of(src.dtype)
        k = kind(s)
        if k == "bool":
            self.val[u] = tuple(self.vcopy(r) for r in self.pieces(src))
            return
        ne = UOp(Ops.CMPNE, u.dtype, (src, UOp.const(src.dtype, 0)))
        self.vcompare_bool(ne)
        self.val[u] = self.val[ne]

    def float_to_i32(self, u: UOp) -> None:
        """vcvtt*2dq truncates; lanes out of int32 range (and NaN) give 0x80000000: when any lane does,
        the whole vector is redone lane by lane with the scalar rules (which wrap like C)."""
        src = u.src[0]
        s = scalar_of(src.dtype)
        if s is dtypes.float64:
            self.narrow(u, lambda d, r, bits: self.emit(Op.VCVTTPD2DQ, [d], [r], (("d", 0, 128), ("u", 0, bits))))
        else:
            self.per_piece(u, lambda d, p, bits: self.vemit(Op.VCVTTPS2DQ, d, [self.vpiece(src, p)], bits))
        out = self.val[u]
        counts = piece_lanes(u.dtype)
        any_bad = None
        for r, n in zip(out, counts, strict=True):
            bits = pbits(n, dtypes.int32)
            m = self.vnew()
            self.vemit(Op.VPCMPEQD, m, [r, self.splat(-(1 << 31), dtypes.int32, bits)], bits)
            if any_bad is None:
                any_bad = m
            else:
                o = self.vnew()
                self.vemit(Op.VPOR, o, [any_bad, m], bits)
                any_bad = o
        done = Label("f2i_ok")
        b = pbits(counts[0], dtypes.int32)
        self.emit(Op.VPTEST, [], [any_bad, any_bad], (("u", 0, b), ("u", 1, b)))
        self.jump(done, Cond.E)
        saved, self.lane_cache = self.lane_cache, None   # values made inside the branch do not outlive it
        packed = self.pack(scalar_of(u.dtype), self.scalar_lanes(u))
        self.lane_cache = saved
        for r, x in zip(out, packed, strict=True):
            self.copy(r, x)
        self.label(done)


# ---- the rules (see ``isel`` for the rule convention) ----
EMITTED = ()  # a rule's result: the UOp became the instructions the rule emitted into ctx.prog


def sel_horizontal(ctx: Any, x: UOp) -> tuple | None:
    """A node of a horizontal reduction tree (``plan_horizontal``): the root reduces the whole vector,
    the other nodes and the lane extractions emit nothing."""
    if x in ctx.facts.hred_skip:
        return EMITTED
    if x in ctx.facts.hred_roots:
        ctx.val[x] = ctx.hreduce(x)
        return EMITTED
    return None


def vector_rule(method: Callable[[Any, UOp], None], vector: Callable[[UOp], bool] | None = None) -> Callable:
    """A rule running ``method`` when ``vector(x)`` says the UOp is a vector one (default: its dtype has
    several lanes), else falling through to the scalar rules."""
    if vector is None:
        def rule(ctx: Any, x: UOp) -> tuple | None:
            if is_vector(x.dtype):
                method(ctx, x)
                return EMITTED
            return None
    else:
        test = vector

        def rule(ctx: Any, x: UOp) -> tuple | None:
            if test(x):
                method(ctx, x)
                return EMITTED
            return None
    return rule


def min_or_max(c: UOp, a: UOp, b: UOp) -> str | None:
    """The instruction computing ``(p<q).where(a, b)`` when a and b are the compared values: ``(p<q).where(p, q)``
    is ``vmin p, q`` and ``(p<q).where(q, p)`` is ``vmax q, p``. Exact: vmin(s1, s2) is ``s1 < s2 ? s1 : s2`` and
    vmax(s1, s2) ``s1 > s2 ? s1 : s2``, both giving s2 when either is NaN or both are zeros (of any sign),
    which is what the ordered compare of the WHERE picks too."""
    p, q = c.src
    if a is p and b is q:
        return "VMIN"
    if a is q and b is p:
        return "VMAX"
    return None


def sel_vminmax(ctx: Any, x: UOp, c: UOp, a: UOp, b: UOp) -> tuple | None:
    """A float WHERE picking between the values its less-than compares: vmin/vmax piece by piece."""
    dt = x.dtype
    if not is_vector(dt) or not native(dt) or not dtypes.is_float(dt.scalar()):
        return None
    name = min_or_max(c, a, b)
    if name is None:
        return None
    ctx.vwhere_minmax(x, name)
    return EMITTED


def _always(x: UOp) -> bool:
    return True


# the nodes and leaves of a reduction tree are scalars of a vector lane dtype (the vector lines of these ops are
# not looked at: the generated matcher tests the dtype inline)
HRED_ISEL = PatternMatcher([(UPat((*HRED_OPS, Ops.GEP), VECTOR_DTYPES, name="x"), sel_horizontal)])

VECTOR_ISEL = PatternMatcher([
    # lanes of a vector (a one-lane GEP has a scalar dtype); VCONST is read from frame slots where used
    (UPat(Ops.GEP, name="x"), vector_rule(VectorSelection.gep, _always)),
    (UPat(Ops.VCONST), lambda: EMITTED),
    # accumulators and stores by the dtype they hold
    (UPat(Ops.DEFINE_REG, name="x"), vector_rule(VectorSelection.vdefine_reg, lambda x: x.dtype.base.count > 1)),
    (UPat(Ops.STORE, name="x"), vector_rule(VectorSelection.vstore, lambda x: is_vector(x.src[1].dtype))),
    # broadcasts (from memory when the load has no other use), lane packing
    (UPat(Ops.VECTORIZE, name="x"), vector_rule(VectorSelection.vectorize)),
    (UPat(Ops.LOAD, name="x"), vector_rule(VectorSelection.vload)),
    # compare + WHERE: a mask and a blend, no bool when WHEREs are the only users
    (UPat(VCMP_OPS, name="x"), vector_rule(VectorSelection.vcompare)),
    (UPat(Ops.WHERE, src=(UPat(Ops.CMPLT, name="c"), UPat.var("a"), UPat.var("b")), name="x"), sel_vminmax),
    (UPat(Ops.WHERE, name="x"), vector_rule(VectorSelection.vwhere)),
    (UPat(Ops.CAST, name="x"), vector_rule(VectorSelection.vcast)),
    (UPat(Ops.BITCAST, name="x"), vector_rule(VectorSelection.vbitcast)),
    # arithmetic piece by piece (FMA into accumulators, folded loads), else lane by lane
    (UPat(GroupOp.ALU - VCMP_OPS - {Ops.WHERE}, name="x"), vector_rule(VectorSelection.valu)),
])
