"""Memory instructions of the emulator: global (FLAT/GLOBAL), LDS (DS) and scalar (SMEM) loads and stores.

In: a decoded memory ``Inst`` and its ``Context``. Out: an op that computes the addresses and, for loads, the
data at issue, and queues the rest on the instruction's counter (``load``/``ds``/``km`` on RDNA4,
``vm``/``lgkm`` on RDNA3) until the wave waits: global loads read memory when issued and write their
VGPRs at the wait; LDS operations happen in order at the wait (so a store is invisible to other waves
until then); global stores write at once. Sub-dword accesses: ``u``/``i`` loads zero/sign-extend, d16
loads and stores touch one 16-bit half and keep the other.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from tg_amd.emu_operands import ALL_LANES, M64, U64_32, Context, Op, scalar_code, sread, unsupported, vreg
from tg_amd.emu_state import EXEC, FULL, Wave, lanes, lds_check
from tg_amd.inst import Inst
from tg_amd.operands import OFF, Reg

MEM_RE = re.compile(r"^(?:global|ds|s)_(load|store)(?:_2addr(?:_stride64)?)?_([biu])(8|16|32|64|96|128|256|512)$")


def _mem_shape(name: str) -> tuple[bool, int, bool, str]:
    """(is load, bytes, sign-extend, d16 part '' / 'lo' / 'hi') of a memory instruction name.

    16-bit halves: ``ds_load_u16_d16(_hi)``, ``ds_store_b16_d16_hi`` (suffix) and ``global_load_d16(_hi)_b16``,
    ``global_store_d16_hi_b16`` (infix)."""
    d16 = ""
    for marker, part in (("_d16_hi", "hi"), ("_d16", "lo")):
        if marker in name:
            d16, name = part, name.replace(marker, "", 1)
            break
    m = MEM_RE.match(name)
    if m is None:
        raise KeyError(name)
    return m.group(1) == "load", int(m.group(3)) // 8, m.group(2) == "i", d16


def _bytes_to_regs(data: np.ndarray, nbytes: int, signed: bool) -> np.ndarray:
    """(lanes, nbytes) uint8 -> (dwords, lanes) uint32 register values (sub-dword loads extended)."""
    if nbytes >= 4:
        return np.ascontiguousarray(data).view("<u4").T
    dtype: Any = {(1, False): np.uint8, (1, True): np.int8, (2, False): "<u2", (2, True): "<i2"}[(nbytes, signed)]
    return data.view(dtype).astype(np.int64).astype(np.uint32).T


def _regs_to_bytes(regs: np.ndarray, nbytes: int, high: bool) -> np.ndarray:
    """(dwords, lanes) uint32 -> (lanes, nbytes) uint8 to store (sub-dword stores take the low or high half)."""
    if nbytes >= 4:
        return np.ascontiguousarray(regs.T).view(np.uint8)
    words = regs[0] >> np.uint32(16) if high else regs[0]
    return np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(-1, 4)[:, :nbytes]


def _write_loaded(w: Wave, dst: int, act: np.ndarray | None, values: np.ndarray, d16: str) -> None:
    """Write loaded dwords (dwords, active lanes) to VGPRs dst.. in the lanes ``act`` (None: all)."""
    cols = ALL_LANES if act is None else act
    if d16:
        old = w.v[dst, cols]
        lo16 = values[0] & np.uint32(0xFFFF)
        values = ((old & np.uint32(0xFFFF0000)) | lo16 if d16 == "lo"
                  else (old & np.uint32(0xFFFF)) | (lo16 << np.uint32(16)))[None]
    if act is None:
        w.v[dst:dst + len(values)] = values
    else:
        w.v[dst:dst + len(values), act] = values


def _active(w: Wave) -> np.ndarray | None:
    ex = w.s[EXEC]
    return None if ex == FULL else np.flatnonzero(lanes(ex))


def global_op(inst: Inst, ctx: Context) -> Op:
    try:
        load, nbytes, signed, d16 = _mem_shape(inst.name)
    except KeyError:
        return unsupported(inst, ctx)
    for key in inst.mods:
        if key != "offset":
            raise ctx.fail(inst, f"modifier {key} is not supported by the emulator")
    offset = inst.mods.get("offset", 0)
    vaddr_op, saddr_op = (inst.operands[1] if load else inst.operands[0]), inst.operands[2]
    data_reg = vreg(inst.operands[0] if load else inst.operands[1], inst, ctx)
    vaddr = vreg(vaddr_op, inst, ctx)
    what = f"{inst.name} at byte {ctx.pos}"
    if saddr_op is OFF:
        def addresses(w: Wave, cols: Any) -> np.ndarray:
            lo, hi = w.v[vaddr, cols].astype(np.uint64), w.v[vaddr + 1, cols].astype(np.uint64)
            return (lo | hi << U64_32) + np.uint64(offset & M64)
    else:
        base = sread(saddr_op, 64)

        def addresses(w: Wave, cols: Any) -> np.ndarray:
            return w.v[vaddr, cols].astype(np.uint64) + np.uint64((base(w) + offset) & M64)
    memory = ctx.memory
    dwords = max(1, nbytes // 4)
    if load:
        counter = ctx.load_counter

        def do_load(w: Wave) -> None:
            act = _active(w)
            if act is not None and not len(act):
                w.queues[counter].append(lambda: None)
                return
            addrs = addresses(w, ALL_LANES if act is None else act)
            values = _bytes_to_regs(memory.read(addrs, nbytes, what), nbytes, signed)  # read now, land at the wait
            w.queues[counter].append(lambda: _write_loaded(w, data_reg, act, values, d16))
        return do_load

    def do_store(w: Wave) -> None:
        act = _active(w)
        cols = ALL_LANES if act is None else act
        if not len(cols):
            return
        memory.write(addresses(w, cols), _regs_to_bytes(w.v[data_reg:data_reg + dwords, cols], nbytes, d16 == "hi"),
                     what)
    return do_store


def buffer_op(inst: Inst, ctx: Context) -> Op:
    """buffer_load/store_{b32..b128, u8, i8, u16, i16, b8, b16}: the address from a 128-bit descriptor in
    four SGPRs (base [47:0], stride [61:48], num_records [95:64]) + soffset + idxen * index * stride +
    offen * vaddr + offset. Range check (soffset not included): with a stride, index < num_records; without,
    the whole access inside num_records bytes. Out of range: loads give 0, stores are dropped. Swizzled
    descriptors and the format conversions of buffer_*_format_* are not modelled."""
    try:
        load, nbytes, signed, d16 = _mem_shape(inst.name.replace("buffer_", "global_", 1))
    except KeyError:
        return unsupported(inst, ctx)
    for key in inst.mods:
        if key not in ("offset", "offen", "idxen", "glc", "slc", "dlc", "th", "scope"):
            raise ctx.fail(inst, f"modifier {key} is not supported by the emulator")
    data_reg = vreg(inst.operands[0], inst, ctx)
    vaddr_op, rsrc_op, soffset_op = inst.operands[1], inst.operands[2], inst.operands[3]
    idxen, offen, offset = bool(inst.mods.get("idxen")), bool(inst.mods.get("offen")), inst.mods.get("offset", 0)
    vaddr = vreg(vaddr_op, inst, ctx) if vaddr_op is not OFF else 0
    rsrc = scalar_code(rsrc_op)
    soffset = sread(soffset_op)
    what = f"{inst.name} at byte {ctx.pos}"
    memory, dwords = ctx.memory, max(1, nbytes // 4)

    def addresses(w: Wave, cols: Any) -> tuple[np.ndarray, np.ndarray]:
        """(address, in range) of the lanes ``cols``."""
        d0, d1, records = w.s[rsrc], w.s[rsrc + 1], w.s[rsrc + 2]
        base, stride = d0 | (d1 & 0xFFFF) << 32, d1 >> 16 & 0x3FFF
        index = w.v[vaddr, cols].astype(np.int64) if idxen else np.zeros(len(cols), np.int64)
        voff = w.v[vaddr + int(idxen), cols].astype(np.int64) if offen else np.zeros_like(index)
        off = voff + offset
        inside = index < records if stride else off + nbytes <= records
        addr = np.int64(base + soffset(w)) + index * stride + off
        return addr.astype(np.uint64), inside

    if load:
        counter = ctx.load_counter

        def do_load(w: Wave) -> None:
            act = _active(w)
            cols = ALL_LANES if act is None else act
            addrs, inside = addresses(w, cols)
            data = np.zeros((len(addrs), nbytes), dtype=np.uint8)
            if inside.any():
                data[inside] = memory.read(addrs[inside], nbytes, what)
            values = _bytes_to_regs(data, nbytes, signed)  # read now, land at the wait
            w.queues[counter].append(lambda: _write_loaded(w, data_reg, act, values, d16))
        return do_load

    def do_store(w: Wave) -> None:
        act = _active(w)
        cols = ALL_LANES if act is None else act
        addrs, inside = addresses(w, cols)
        if inside.any():
            data = _regs_to_bytes(w.v[data_reg:data_reg + dwords, cols], nbytes, d16 == "hi")
            memory.write(addrs[inside], data[inside], what)
    return do_store


def ds_op(inst: Inst, ctx: Context) -> Op:
    try:
        load, nbytes, signed, d16 = _mem_shape(inst.name)
    except KeyError:
        return unsupported(inst, ctx)
    two = "_2addr" in inst.name
    stride = (64 if "stride64" in inst.name else 1) * nbytes
    offsets = ([inst.mods.get("offset0", 0) * stride, inst.mods.get("offset1", 0) * stride] if two
               else [inst.mods.get("offset", 0)])
    if load:
        dst, addr = vreg(inst.operands[0], inst, ctx), vreg(inst.operands[1], inst, ctx)
        datas = [dst + i * max(1, nbytes // 4) for i in range(len(offsets))]
    else:
        addr = vreg(inst.operands[0], inst, ctx)
        datas = [vreg(op, inst, ctx) for op in inst.operands[1:]]
    dwords = max(1, nbytes // 4)
    span = np.arange(nbytes)
    word_span = np.arange(dwords)
    what = f"{inst.name} at byte {ctx.pos}"
    counter = ctx.ds_counter
    counts = ctx.counts
    # fast paths: whole aligned dwords through a uint32 view of LDS, aligned 16-bit through a uint16 view
    unit = 4 if nbytes % 4 == 0 else 2 if nbytes == 2 else 1
    if any(off % unit for off in offsets):
        unit = 1

    def op(w: Wave) -> None:
        act = _active(w)
        cols = ALL_LANES if act is None else act
        base = (w.v[addr] if act is None else w.v[addr, cols]).astype(np.int64)
        lds = w.group.lds
        if len(base):
            lo, hi = int(base.min()) + min(offsets), int(base.max()) + max(offsets)
            lds_check(w.group.lds_bytes, lo, hi, nbytes, what)
        step = unit if unit == 1 or not (base & (unit - 1)).any() else 1
        if counts is not None:
            for off in offsets:
                counts.lds(base + off, cols, nbytes)
        if load:
            stores: list[Any] = []
        elif step == 4:
            stores = [w.v[d:d + dwords, cols].T.copy() for d in datas]
        elif step == 2:
            stores = [(w.v[d, cols] >> np.uint32(16) if d16 == "hi" else w.v[d, cols]).astype(np.uint16)
                      for d in datas]
        else:
            stores = [_regs_to_bytes(w.v[d:d + dwords, cols], nbytes, d16 == "hi") for d in datas]

        def complete() -> None:   # LDS operations of a wave happen in order, when the wave waits for them
            for i, (off, reg) in enumerate(zip(offsets, datas, strict=True)):
                addrs = base + off
                if step == 4:
                    where = (addrs >> 2)[:, None] + word_span
                    if load:
                        _write_loaded(w, reg, act, lds.view(np.uint32)[where].T, d16)
                    else:
                        lds.view(np.uint32)[where] = stores[i]
                elif step == 2:
                    if load:
                        halves = lds.view("<i2" if signed else "<u2")[addrs >> 1]
                        _write_loaded(w, reg, act, halves.astype(np.int64).astype(np.uint32)[None], d16)
                    else:
                        lds.view(np.uint16)[addrs >> 1] = stores[i]
                else:
                    where = addrs[:, None] + span
                    if load:
                        _write_loaded(w, reg, act, _bytes_to_regs(lds[where], nbytes, signed), d16)
                    else:
                        lds[where] = stores[i]
        w.queues[counter].append(complete)
    return op


def smem_op(inst: Inst, ctx: Context) -> Op:
    m = re.match(r"^s_load_b(32|64|96|128|256|512)$", inst.name)
    if not m:
        return unsupported(inst, ctx)
    dwords = int(m.group(1)) // 32
    dst = scalar_code(inst.operands[0])
    base = sread(inst.operands[1], 64)
    third = inst.operands[2]
    imm = inst.mods.get("offset", 0) + (third if isinstance(third, int) else 0)
    soff = sread(third) if isinstance(third, Reg) else (lambda w: 0)
    memory, counter, what = ctx.memory, ctx.smem_counter, f"{inst.name} at byte {ctx.pos}"

    def op(w: Wave) -> None:
        addr = (base(w) + imm + soff(w)) & M64
        data = memory.read(np.array([addr], dtype=np.uint64), 4 * dwords, what).view("<u4")[0]
        values = [int(x) for x in data]

        def complete() -> None:
            w.s[dst:dst + dwords] = values
        w.queues[counter].append(complete)
    return op
