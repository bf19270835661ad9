"""The device model's command interface: the command queue entry, mailbox chains and the commands.

In:  a doorbell for the command queue entry (from ``Mlx5Model.bar_write32``).
Out: the entry's delivery status and ownership, the command's output (status, syndrome, data) written back
     into the entry and output mailboxes, and the model's HCA / PD / key / CQ / QP state changed.

``CommandProcessor`` is a mixin of ``Mlx5Model``: it uses the model's memory (``mem``, ``_segment``), lock and
state dictionaries. Field tables come from ``mlx5_model_tables`` (never from the driver).
"""
from __future__ import annotations

import struct
from typing import Any

from tg_mlx_rdma.testing.mlx5_model_tables import (
    BAD_INPUT_LEN,
    BAD_OP,
    BAD_OUTPUT_LEN,
    BAD_PARAM,
    BAD_QP_STATE,
    BAD_SYS_STATE,
    BASIC_BLOCK,
    BLOCK,
    BLOCK_DATA,
    BLOCK_SIZE,
    BOOT_PAGES,
    CAP,
    CAP_AT,
    CAP_BYTES,
    CAPS,
    CQ,
    CQE_SIZE,
    DELIVERY_BLOCK_NUMBER,
    DELIVERY_IN_PTR,
    DELIVERY_OUT_PTR,
    DELIVERY_SIGNATURE,
    DELIVERY_TOKEN,
    DELIVERY_TYPE,
    ENTRY,
    ENTRY_IN,
    ENTRY_OUT,
    EQ,
    GID_OUT,
    GIDS_NUM_OUT,
    INIT,
    INIT_PAGES,
    INLINE,
    ISSI_CURRENT,
    ISSI_SUPPORTED_DW0,
    MKEY,
    MKEY_IN,
    OP_MOD,
    OPCODE,
    OUT_EQN,
    OUT_OBJ,
    OUT_STATUS,
    OUT_SYNDROME,
    PAGE,
    PAGES_ENTRIES_IN,
    PAGES_LIST,
    PAGES_NUM_OUT,
    PAS_AT,
    QP,
    QPN_IN,
    QUERY_ISSI_OUT_SIZE,
    RTR,
    TRANSITIONS,
    CmdFailed,
    Delivery,
    MKey,
    ModelCq,
    ModelFault,
    ModelQp,
    get,
    put,
    xor_all,
)

__all__ = ["CommandProcessor"]


class CommandProcessor:
    """Serves the command queue for ``Mlx5Model`` (see the module docstring)."""

    _lock: Any
    _enabled: bool
    _initialized: bool
    _issi: int
    _pages_given: int
    _caps: dict[str, int]
    _uars: set[int]
    _pds: set[int]
    _eqs: set[int]
    _mkeys: dict[int, MKey]
    _cqs: dict[int, ModelCq]
    _qps: dict[int, ModelQp]
    _ids: Any
    faults: list[str]
    gid: bytes

    def mem(self, addr: int, length: int) -> memoryview:
        raise NotImplementedError

    def _segment(self, addr: int, length: int) -> Any:
        raise NotImplementedError

    def _socket_path(self, gid: bytes) -> Any:
        raise NotImplementedError

    def _command(self, entry_addr: int) -> None:
        entry = self.mem(entry_addr, 64)
        if not get(entry, ENTRY["status_own"]) & 1:
            self.faults.append("command doorbell rung for an entry software owns")
            return
        try:
            if xor_all(bytes(entry)) != 0xFF:
                raise Delivery(DELIVERY_SIGNATURE)
            if get(entry, ENTRY["type"]) != 0x7:
                raise Delivery(DELIVERY_TYPE)
            token = get(entry, ENTRY["token"])
            inlen, outlen = get(entry, ENTRY["inlen"]), get(entry, ENTRY["outlen"])
            data = self._read_chain(entry, token, inlen)
            out_blocks = self._out_chain(entry, token, outlen)
            try:
                if inlen < 16:
                    raise CmdFailed(BAD_INPUT_LEN, "input too short")
                out = self._execute(data)
                if len(out) > outlen:
                    raise CmdFailed(BAD_OUTPUT_LEN, "output too short")
            except CmdFailed as e:
                out = bytearray(16)
                put(out, OUT_STATUS, e.status)
                put(out, OUT_SYNDROME, e.syndrome)
            out = bytearray(out) + bytes(max(0, min(outlen, INLINE + BLOCK_DATA * len(out_blocks)) - len(out)))
            entry[ENTRY_OUT:ENTRY_OUT + INLINE] = out[:INLINE].ljust(INLINE, b"\0")
            for i, block in enumerate(out_blocks):
                chunk = out[INLINE + i * BLOCK_DATA:INLINE + (i + 1) * BLOCK_DATA]
                block[:len(chunk)] = chunk
            delivery = 0
        except Delivery as d:
            delivery = d.status
        put(entry, ENTRY["status_own"], delivery << 1)  # ownership back to software, last

    def _blocks(self, entry: memoryview, which: str, token: int, nbytes: int) -> list[memoryview]:
        count = -(-max(nbytes - INLINE, 0) // BLOCK_DATA)
        addr = get(entry, ENTRY[which])
        blocks = []
        for i in range(count):
            try:
                block = self.mem(addr, BLOCK_SIZE)
            except ModelFault:
                raise Delivery(DELIVERY_IN_PTR if which == "in_ptr" else DELIVERY_OUT_PTR) from None
            if xor_all(bytes(block)) != 0xFF or xor_all(bytes(block[0x200:0x23F])) != 0xFF:
                raise Delivery(DELIVERY_SIGNATURE)
            if get(block, BLOCK["number"]) != i:
                raise Delivery(DELIVERY_BLOCK_NUMBER)
            if get(block, BLOCK["token"]) != token:
                raise Delivery(DELIVERY_TOKEN)
            blocks.append(block)
            addr = get(block, BLOCK["next"])
        return blocks

    def _read_chain(self, entry: memoryview, token: int, inlen: int) -> bytearray:
        data = bytearray(entry[ENTRY_IN:ENTRY_IN + INLINE])
        for block in self._blocks(entry, "in_ptr", token, inlen):
            data += block[:BLOCK_DATA]
        return data[:inlen]

    def _out_chain(self, entry: memoryview, token: int, outlen: int) -> list[memoryview]:
        return self._blocks(entry, "out_ptr", token, outlen)

    def _execute(self, cmd: bytearray) -> bytearray:
        opcode = get(cmd, OPCODE)
        handler = self.COMMANDS.get(opcode)
        if handler is None:
            raise CmdFailed(BAD_OP, "unknown opcode")
        if opcode not in (0x104,) and not self._enabled:
            raise CmdFailed(BAD_SYS_STATE, "not enabled")
        with self._lock:
            return handler(self, cmd)

    @staticmethod
    def _out(size: int = 16) -> bytearray:
        return bytearray(size)

    def _need(self, cmd: bytearray, nbytes: int) -> None:
        if len(cmd) < nbytes:
            raise CmdFailed(BAD_INPUT_LEN, "input too short")

    def _need_init(self) -> None:
        if not self._initialized:
            raise CmdFailed(BAD_SYS_STATE, "not initialized")

    def _page_list(self, cmd: bytearray, at: int, count: int) -> list[int]:
        self._need(cmd, at + 8 * count)
        pages = [struct.unpack_from(">Q", cmd, at + 8 * i)[0] for i in range(count)]
        for p in pages:
            try:
                self._segment(p, PAGE)
            except ModelFault:
                raise CmdFailed(BAD_PARAM, "bad page address") from None
            if p % PAGE:
                raise CmdFailed(BAD_PARAM, "bad page address")
        return pages

    # -- HCA
    def _enable_hca(self, cmd: bytearray) -> bytearray:
        self._enabled = True
        return self._out()

    def _query_issi(self, cmd: bytearray) -> bytearray:
        out = self._out(QUERY_ISSI_OUT_SIZE)
        put(out, ISSI_CURRENT, self._issi)
        put(out, ISSI_SUPPORTED_DW0, 0b11)  # ISSI 0 and 1
        return out

    def _set_issi(self, cmd: bytearray) -> bytearray:
        if get(cmd, ISSI_CURRENT) not in (0, 1):
            raise CmdFailed(BAD_PARAM, "bad issi")
        self._issi = get(cmd, ISSI_CURRENT)
        return self._out()

    def _query_pages(self, cmd: bytearray) -> bytearray:
        out = self._out()
        wanted = {1: BOOT_PAGES, 2: BOOT_PAGES + INIT_PAGES}.get(get(cmd, OP_MOD), 0)
        put(out, PAGES_NUM_OUT, max(wanted - self._pages_given, 0))
        return out

    def _manage_pages(self, cmd: bytearray) -> bytearray:
        if get(cmd, OP_MOD) != 1:
            raise CmdFailed(BAD_PARAM, "bad page list")
        n = get(cmd, PAGES_ENTRIES_IN)
        self._pages_given += len(self._page_list(cmd, PAGES_LIST, n))
        return self._out()

    def _query_hca_cap(self, cmd: bytearray) -> bytearray:
        if get(cmd, OP_MOD) >> 1 != 0:
            raise CmdFailed(BAD_PARAM, "bad cap type")
        out = self._out(CAP_AT + CAP_BYTES)
        caps = CAPS if get(cmd, OP_MOD) & 1 == 0 else self._caps
        for name, spec in CAP.items():
            put(out, spec, caps[name], CAP_AT)
        return out

    def _set_hca_cap(self, cmd: bytearray) -> bytearray:
        if self._initialized:
            raise CmdFailed(BAD_SYS_STATE, "already initialized")
        self._need(cmd, CAP_AT + CAP_BYTES)
        for name, spec in CAP.items():
            value = get(cmd, spec, CAP_AT)
            if value > CAPS[name] and name.startswith("log_max"):
                raise CmdFailed(BAD_PARAM, "queue too big")
            self._caps[name] = value
        return self._out()

    def _init_hca(self, cmd: bytearray) -> bytearray:
        if self._pages_given < BOOT_PAGES + INIT_PAGES:
            raise CmdFailed(BAD_SYS_STATE, "pages missing")
        self._initialized = True
        return self._out()

    def _alloc(self, registry: set[int]) -> bytearray:
        self._need_init()
        n = next(self._ids)
        registry.add(n)
        out = self._out()
        put(out, OUT_OBJ, n)
        return out

    def _alloc_uar(self, cmd: bytearray) -> bytearray:
        return self._alloc(self._uars)

    def _alloc_pd(self, cmd: bytearray) -> bytearray:
        return self._alloc(self._pds)

    def _query_gid(self, cmd: bytearray) -> bytearray:
        out = self._out(GID_OUT + 16)
        put(out, GIDS_NUM_OUT, 1)
        out[GID_OUT:GID_OUT + 16] = self.gid
        return out

    # -- objects
    def _create_mkey(self, cmd: bytearray) -> bytearray:
        self._need_init()
        self._need(cmd, 0x110)
        m = {k: get(cmd, spec) for k, spec in MKEY.items()}
        if m["pd"] not in self._pds:
            raise CmdFailed(BAD_PARAM, "bad pd")
        if m["access_mode"] != 0:
            raise CmdFailed(BAD_PARAM, "bad access mode")
        try:
            self._segment(m["start"], m["len"])
        except ModelFault:
            raise CmdFailed(BAD_PARAM, "bad page address") from None
        index = next(self._ids)
        self._mkeys[index] = MKey(m["key"], m["pd"], m["start"], m["len"], bool(m["lr"]), bool(m["lw"]),
                                  bool(m["rr"]), bool(m["rw"]))
        out = self._out()
        put(out, OUT_OBJ, index)
        return out

    def _destroy_mkey(self, cmd: bytearray) -> bytearray:
        self._need_init()
        if self._mkeys.pop(get(cmd, MKEY_IN), None) is None:
            raise CmdFailed(BAD_PARAM, "bad mkey")
        return self._out()

    def _create_eq(self, cmd: bytearray) -> bytearray:
        self._need_init()
        log_size = get(cmd, EQ["log_size"])
        if get(cmd, EQ["uar"]) not in self._uars:
            raise CmdFailed(BAD_PARAM, "bad uar")
        self._page_list(cmd, PAS_AT, max((64 << log_size) // PAGE, 1))
        eqn = len(self._eqs) + 1
        self._eqs.add(eqn)
        out = self._out()
        put(out, OUT_EQN, eqn)
        return out

    def _create_cq(self, cmd: bytearray) -> bytearray:
        self._need_init()
        c = {k: get(cmd, spec) for k, spec in CQ.items()}
        if c["log_size"] > self._caps["log_max_cq_sz"]:
            raise CmdFailed(BAD_PARAM, "queue too big")
        if c["uar"] not in self._uars:
            raise CmdFailed(BAD_PARAM, "bad uar")
        if c["eqn"] not in self._eqs:
            raise CmdFailed(BAD_PARAM, "bad eq")
        self._check_doorbell_record(c["dbr"])
        pages = self._page_list(cmd, PAS_AT, max((CQE_SIZE << c["log_size"]) // PAGE, 1))
        cqn = next(self._ids)
        self._cqs[cqn] = ModelCq(cqn, c["log_size"], pages, c["dbr"])
        out = self._out()
        put(out, OUT_OBJ, cqn)
        return out

    def _check_doorbell_record(self, addr: int) -> None:
        try:
            self._segment(addr, 8)
        except ModelFault:
            raise CmdFailed(BAD_PARAM, "bad doorbell address") from None

    def _create_qp(self, cmd: bytearray) -> bytearray:
        self._need_init()
        q = {k: get(cmd, spec) for k, spec in QP.items()}
        if q["st"] != 0:
            raise CmdFailed(BAD_PARAM, "bad service type")
        if q["pd"] not in self._pds:
            raise CmdFailed(BAD_PARAM, "bad pd")
        if q["cqn_snd"] not in self._cqs or q["cqn_rcv"] not in self._cqs:
            raise CmdFailed(BAD_PARAM, "bad cq")
        if q["uar"] not in self._uars:
            raise CmdFailed(BAD_PARAM, "bad uar")
        if max(q["log_sq_size"], q["log_rq_size"]) > self._caps["log_max_qp_sz"]:
            raise CmdFailed(BAD_PARAM, "queue too big")
        self._check_doorbell_record(q["dbr"])
        stride = 16 << q["log_rq_stride"]
        nbytes = (stride << q["log_rq_size"]) + (BASIC_BLOCK << q["log_sq_size"])
        pages = self._page_list(cmd, PAS_AT, -(-nbytes // PAGE))
        qpn = next(self._ids)
        self._qps[qpn] = ModelQp(qpn, q["pd"], q["log_sq_size"], q["log_rq_size"], stride, q["cqn_snd"],
                                 q["cqn_rcv"], q["dbr"], pages, q["uar"])
        out = self._out()
        put(out, OUT_OBJ, qpn)
        return out

    def _modify_qp(self, cmd: bytearray) -> bytearray:
        self._need_init()
        qp = self._qps.get(get(cmd, QPN_IN))
        if qp is None:
            raise CmdFailed(BAD_PARAM, "bad qpn")
        allowed, to = TRANSITIONS[get(cmd, OPCODE)]
        if qp.state not in allowed:
            raise CmdFailed(BAD_QP_STATE, "bad qp state transition")
        if to == INIT:
            qp.rwe = bool(get(cmd, QP["rwe"]))
        elif to == RTR:
            qp.remote_qpn = get(cmd, QP["remote_qpn"])
            qp.remote_gid = get(cmd, QP["rgid"]).to_bytes(16, "big")
            if not self._socket_path(qp.remote_gid).exists():
                raise CmdFailed(BAD_PARAM, "unreachable gid")
        qp.state = to
        return self._out()

    def _query_qp(self, cmd: bytearray) -> bytearray:
        qp = self._qps.get(get(cmd, QPN_IN))
        if qp is None:
            raise CmdFailed(BAD_PARAM, "bad qpn")
        out = self._out(0x110)
        put(out, QP["state"], qp.state)
        return out

    COMMANDS = {0x104: _enable_hca, 0x10A: _query_issi, 0x10B: _set_issi, 0x107: _query_pages,
                0x108: _manage_pages, 0x100: _query_hca_cap, 0x109: _set_hca_cap, 0x102: _init_hca,
                0x802: _alloc_uar, 0x800: _alloc_pd, 0x764: _query_gid, 0x200: _create_mkey, 0x202: _destroy_mkey,
                0x301: _create_eq,
                0x400: _create_cq, 0x500: _create_qp, 0x502: _modify_qp, 0x503: _modify_qp, 0x504: _modify_qp,
                0x507: _modify_qp, 0x50A: _modify_qp, 0x50B: _query_qp}
