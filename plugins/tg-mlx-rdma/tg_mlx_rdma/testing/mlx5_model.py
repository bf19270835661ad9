"""A software ConnectX (mlx5) device, written from the PRM, for testing the driver without hardware.

In:  the driver's accesses through the ``HardwareAccess`` interface: BAR reads/writes (init segment,
     command doorbell, UAR doorbells), DMA memory it allocates from the model.
Out: what a device would do: serve the command queue, keep HCA/QP state, execute send WQEs when the
     UAR doorbell rings, take receive WQEs from the doorbell record, move the bytes to the peer device
     (another model, usually in another process) and write CQEs with the owner bit and WQE counter.

This module deliberately does NOT import the driver's layouts (``tg_mlx_rdma.mlx5.prm``): its field
tables below are written separately from the PRM as (byte offset of the big-endian dword, low bit,
width), so the tests cross-check two independent readings of the manual (and both against the
headers). Departures from hardware, on purpose:

- DMA memory is a set of shared-memory files (``/dev/shm``); a bus address is an offset in the model's
  address space. Memory keys are physical-address mode only; each key covers [start, start + len).
- The wire is a Unix socket per device in a fabric directory, named by the port GID. A SEND or
  RDMA_WRITE request carries where the payload is (shared-memory file and offset); the responder
  copies it (the DMA) and answers ACK or NAK with a syndrome; the requester then writes its CQE. A
  SEND that finds no receive WQE waits (RNR retry), and a request to a QP not yet in RTR waits (transport
  retry), each up to ``rnr_timeout`` seconds.
- Command syndromes are this model's own (firmware syndromes are opaque numbers): ``SYNDROMES``.
- Signatures are always checked (the real device checks them only when enabled).
"""
from __future__ import annotations

import itertools
import mmap
import os
import struct
import sys
import tempfile
import threading
import time
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from tg_mlx_rdma.mlx5.hw import DmaBuffer, HardwareAccess

__all__ = ["Mlx5Model", "SYNDROMES", "ModelFault"]

PAGE = 4096
SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())

# ----------------------------------------------------------------------------------------------- field tables
# (byte offset of the big-endian dword holding the field, lowest bit inside that dword, width in bits);
# width 64 = a big-endian u64 at that byte offset. Written from the PRM's tables.
F = tuple[int, int, int]
OPCODE: F = (0x00, 16, 16)
OP_MOD: F = (0x04, 0, 16)
QPN_IN: F = (0x08, 0, 24)  # modify/query QP: the QP number
OUT_STATUS: F = (0x00, 24, 8)
OUT_SYNDROME: F = (0x04, 0, 32)
OUT_OBJ: F = (0x08, 0, 24)  # uar, pd, mkey index, cqn, qpn of the ALLOC_*/CREATE_* outputs
OUT_EQN: F = (0x08, 0, 8)

ISSI_CURRENT: F = (0x08, 0, 16)  # SET_ISSI in, QUERY_ISSI out
ISSI_SUPPORTED_DW0: F = (0x6C, 0, 32)
QUERY_ISSI_OUT_SIZE = 0x70
PAGES_NUM_OUT: F = (0x0C, 0, 32)  # QUERY_PAGES out (signed)
PAGES_ENTRIES_IN: F = (0x0C, 0, 32)  # MANAGE_PAGES in
PAGES_LIST = 0x10

CAP_AT, CAP_BYTES = 0x10, 0x1000
CAP = {  # general device capabilities, offsets inside the capability block
    "log_max_qp_sz": (0x10, 16, 8), "log_max_qp": (0x10, 0, 5), "log_max_cq_sz": (0x18, 16, 8),
    "log_max_cq": (0x18, 0, 5), "log_max_eq_sz": (0x1C, 24, 8), "log_max_mkey": (0x1C, 16, 6),
    "log_max_eq": (0x1C, 0, 4), "num_ports": (0x34, 0, 8), "log_max_msg": (0x38, 24, 5),
    "cmdif_checksum": (0x40, 14, 2), "log_pg_sz": (0x48, 0, 8), "max_wqe_sz_sq": (0x50, 0, 16),
    "max_wqe_sz_rq": (0x54, 0, 16), "log_max_pd": (0x64, 16, 5),
}
GID_INDEX_IN: F = (0x0C, 0, 16)
GIDS_NUM_OUT: F = (0x0C, 16, 16)
GID_OUT = 0x10

MKEY = {  # CREATE_MKEY (the mkey context starts at byte 0x10)
    "a": (0x10, 14, 1), "rw": (0x10, 13, 1), "rr": (0x10, 12, 1), "lw": (0x10, 11, 1), "lr": (0x10, 10, 1),
    "access_mode": (0x10, 8, 2), "qpn": (0x14, 8, 24), "key": (0x14, 0, 8), "pd": (0x1C, 0, 24),
    "start": (0x20, 0, 64), "len": (0x28, 0, 64)}
CTX = 0x10  # EQ / CQ context inside CREATE_EQ / CREATE_CQ
EQ = {"log_size": (CTX + 0x0C, 24, 5), "uar": (CTX + 0x0C, 0, 24)}
CQ = {"cqe_sz": (CTX, 21, 3), "log_size": (CTX + 0x0C, 24, 5), "uar": (CTX + 0x0C, 0, 24),
      "eqn": (CTX + 0x14, 0, 32), "dbr": (CTX + 0x38, 0, 64)}
PAS_AT = 0x110  # page list after CREATE_EQ/CQ/QP's input
QP = {  # CREATE_QP and the modify commands (the QP context starts at byte 0x18)
    "state": (0x18, 28, 4), "st": (0x18, 16, 8), "pm_state": (0x18, 11, 2), "pd": (0x1C, 0, 24),
    "mtu": (0x20, 29, 3), "log_msg_max": (0x20, 24, 5), "log_rq_size": (0x20, 19, 4), "log_rq_stride": (0x20, 16, 3),
    "no_sq": (0x20, 15, 1), "log_sq_size": (0x20, 11, 4), "uar": (0x24, 0, 24), "remote_qpn": (0x2C, 0, 24),
    "grh": (0x34, 23, 1), "rlid": (0x34, 0, 16), "rgid": (0x40, 0, 128), "port": (0x54, 16, 8),
    "cqn_snd": (0x94, 0, 24), "rwe": (0xA8, 14, 1), "cqn_rcv": (0xB4, 0, 24), "dbr": (0xB8, 0, 64),
    "rq_type": (0xC4, 24, 3)}

# command entry (64 bytes) and mailbox block (576 bytes, 1 KiB apart), PRM "Command Queue Entry" / "Mailbox"
ENTRY = {"type": (0x00, 24, 8), "inlen": (0x04, 0, 32), "in_ptr": (0x08, 0, 64), "out_ptr": (0x30, 0, 64),
         "outlen": (0x38, 0, 32), "token": (0x3C, 24, 8), "status_own": (0x3C, 0, 8)}
ENTRY_IN, ENTRY_OUT, INLINE = 0x10, 0x20, 16
BLOCK = {"next": (0x230, 0, 64), "number": (0x238, 0, 32), "token": (0x23C, 16, 8)}
BLOCK_DATA, BLOCK_SIZE = 512, 576

# doorbell / WQE / CQE bytes, PRM "Send WQE Format", "Receive WQE Format", "CQE Format"
WQE_CTRL = {"opcode": (0x0, 0, 8), "index": (0x0, 8, 16), "ds": (0x4, 0, 6), "qpn": (0x4, 8, 24),
            "fm_ce_se": (0x8, 0, 8)}
SEG = 16
BASIC_BLOCK = 64
SEND, RDMA_WRITE = 0x0A, 0x08
CQE_SIZE = 64

# init segment registers
FW_REV, CMDIF_REV_FW_SUB, CMDQ_H, CMDQ_L, CMD_DBELL, INITIALIZING = 0x0, 0x4, 0x10, 0x14, 0x18, 0x1FC

# QP states and the commands that move between them: command -> (allowed from, to)
RST, INIT, RTR, RTS, ERR = 0, 1, 2, 3, 6
TRANSITIONS = {0x502: ({RST}, INIT), 0x503: ({INIT}, RTR), 0x504: ({RTR}, RTS),
               0x507: ({RST, INIT, RTR, RTS, ERR}, ERR), 0x50A: ({RST, INIT, RTR, RTS, ERR}, RST)}

# command status codes and this model's syndromes (reason -> syndrome)
OK, BAD_OP, BAD_PARAM, BAD_SYS_STATE, BAD_RESOURCE, EXCEED_LIM, BAD_QP_STATE, BAD_INPUT_LEN, BAD_OUTPUT_LEN = (
    0x0, 0x2, 0x3, 0x4, 0x5, 0x8, 0x10, 0x50, 0x51)
SYNDROMES = {
    "unknown opcode": 0x0BAD0001, "not enabled": 0x0B0A0002, "pages missing": 0x0B0A0003,
    "not initialized": 0x0B0A0004, "bad issi": 0x0B0A0005, "bad page address": 0x0B0A0006,
    "bad cap type": 0x0B0A0007, "bad pd": 0x0B0A0008, "bad access mode": 0x0B0A0009, "bad uar": 0x0B0A000A,
    "bad eq": 0x0B0A000B, "bad cq": 0x0B0A000C, "queue too big": 0x0B0A000D, "bad page list": 0x0B0A000E,
    "bad service type": 0x0B0A000F, "bad qpn": 0x0B0A0010, "bad qp state transition": 0x0B0A0011,
    "input too short": 0x0B0A0012, "output too short": 0x0B0A0013, "bad doorbell address": 0x0B0A0014,
    "unreachable gid": 0x0B0A0015, "already initialized": 0x0B0A0016,
}
# delivery status (entry byte 63 bits 7:1) and CQE syndromes, PRM
DELIVERY_SIGNATURE, DELIVERY_TOKEN, DELIVERY_BLOCK_NUMBER, DELIVERY_OUT_PTR, DELIVERY_IN_PTR, DELIVERY_TYPE = (
    0x1, 0x2, 0x3, 0x4, 0x5, 0x10)
LOCAL_LENGTH, LOCAL_QP_OP, LOCAL_PROT, WR_FLUSH, REMOTE_INVAL_REQ, REMOTE_ACCESS, REMOTE_OP = (
    0x1, 0x2, 0x4, 0x5, 0x12, 0x13, 0x14)
TRANSPORT_RETRY_EXC, RNR_RETRY_EXC = 0x15, 0x16
CQE_REQ, CQE_RESP_SEND, CQE_REQ_ERR, CQE_RESP_ERR = 0x0, 0x2, 0xD, 0xE
BOOT_PAGES, INIT_PAGES = 4, 12
CAPS = {"log_max_qp_sz": 15, "log_max_qp": 16, "log_max_cq_sz": 22, "log_max_cq": 16, "log_max_eq_sz": 22,
        "log_max_mkey": 20, "log_max_eq": 4, "num_ports": 1, "log_max_msg": 30, "cmdif_checksum": 0,
        "log_pg_sz": 12, "max_wqe_sz_sq": 1024, "max_wqe_sz_rq": 512, "log_max_pd": 16}


def get(buf: Any, spec: F, base: int = 0) -> int:
    off, low, width = spec
    if width == 64:
        return int(struct.unpack_from(">Q", buf, base + off)[0])
    if width == 128:
        return int.from_bytes(bytes(buf[base + off:base + off + 16]), "big")
    return (struct.unpack_from(">I", buf, base + off)[0] >> low) & ((1 << width) - 1)


def put(buf: Any, spec: F, value: int, base: int = 0) -> None:
    off, low, width = spec
    if width == 64:
        struct.pack_into(">Q", buf, base + off, value)
        return
    word = struct.unpack_from(">I", buf, base + off)[0]
    mask = ((1 << width) - 1) << low
    struct.pack_into(">I", buf, base + off, (word & ~mask) | ((value << low) & mask))


def xor_all(data: bytes) -> int:
    x = 0
    for b in data:
        x ^= b
    return x


class ModelFault(RuntimeError):
    """The driver did something the device would reject outside the command protocol (or the model broke)."""


class CmdFailed(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.syndrome = status, SYNDROMES[reason]


class Delivery(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class Segment:
    base: int
    size: int
    name: str
    mm: mmap.mmap


@dataclass
class MKey:
    key: int
    pd: int
    start: int
    length: int
    lr: bool
    lw: bool
    rr: bool
    rw: bool


@dataclass
class ModelCq:
    cqn: int
    log_size: int
    pages: list[int]
    dbr: int
    pi: int = 0


@dataclass
class ModelQp:
    qpn: int
    pd: int
    log_sq: int
    log_rq: int
    rq_stride: int
    cq_snd: int
    cq_rcv: int
    dbr: int
    pages: list[int]
    uar: int
    state: int = RST
    remote_qpn: int = 0
    remote_gid: bytes = b""
    rwe: bool = False
    sq_ci: int = 0  # WQEs taken (unwrapped)
    rq_ci: int = 0
    seq: itertools.count = field(default_factory=itertools.count)
    inflight: dict[int, tuple[int, bool, int]] = field(default_factory=dict)  # seq -> (wqe index, signalled, op)


class Mlx5Model(HardwareAccess):
    """One model device. ``fabric`` is a directory shared by the devices that can reach each other."""

    def __init__(self, fabric: str | Path, name: str = "", rnr_timeout: float = 60.0,
                 fw_version: tuple[int, int, int] = (22, 39, 1002)) -> None:
        self.fabric = Path(fabric)
        self.fabric.mkdir(parents=True, exist_ok=True)
        label = name or f"{os.getpid()}-{id(self):x}"
        self.gid = bytes.fromhex("fe800000000000000000") + zlib.crc32(label.encode()).to_bytes(4, "big") + \
            os.getpid().to_bytes(4, "big")[2:]
        self.rnr_timeout = rnr_timeout
        self.bar = bytearray(0x40000)
        major, minor, sub = fw_version
        put(self.bar, (FW_REV, 0, 32), (minor << 16) | major)
        put(self.bar, (CMDIF_REV_FW_SUB, 0, 32), (5 << 16) | sub)
        put(self.bar, (CMDQ_L, 0, 32), (0 << 4) | 6)  # one entry, 64-byte stride
        put(self.bar, (INITIALIZING, 0, 32), 1 << 31)
        self.faults: list[str] = []
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._next = 0x10_0000_0000 * (1 + zlib.crc32(label.encode()) % 0x7F)
        self._lock = threading.RLock()
        self._cmdq = 0
        self._enabled = self._initialized = False
        self._issi = 0
        self._pages_given = 0
        self._caps = dict(CAPS)
        self._uars: set[int] = set()
        self._pds: set[int] = set()
        self._eqs: set[int] = set()
        self._mkeys: dict[int, MKey] = {}
        self._cqs: dict[int, ModelCq] = {}
        self._qps: dict[int, ModelQp] = {}
        self._ids = itertools.count(1)
        self._peers: dict[bytes, Connection] = {}
        self._attached: dict[str, mmap.mmap] = {}
        self._closed = False
        self.wqes_executed = 0
        self._listener = Listener(str(self._socket_path(self.gid)), family="AF_UNIX")
        threading.Thread(target=self._accept_loop, name="mlx5-model-accept", daemon=True).start()

    # ------------------------------------------------------------------------------------ memory
    def dma_alloc(self, size: int) -> DmaBuffer:
        size = max(-(-size // PAGE) * PAGE, PAGE)
        name = f"tg-mlx5-{os.getpid()}-{self._next:x}"
        path = SHM_DIR / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        with self._lock:
            seg = Segment(self._next, size, name, mm)
            self._segments.append(seg)
            self._bases.append(seg.base)
            self._next += size + PAGE  # a guard gap: running off a buffer is never another buffer
        return DmaBuffer(memoryview(mm), seg.base, size, mm)

    def _segment(self, addr: int, length: int) -> tuple[Segment, int]:
        i = bisect_right(self._bases, addr) - 1
        if i < 0 or addr + length > self._segments[i].base + self._segments[i].size:
            raise ModelFault(f"DMA to {addr:#x}+{length} is outside the memory the driver allocated")
        seg = self._segments[i]
        return seg, addr - seg.base

    def mem(self, addr: int, length: int) -> memoryview:
        seg, off = self._segment(addr, length)
        return memoryview(seg.mm)[off:off + length]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._listener.close()
            self._socket_path(self.gid).unlink(missing_ok=True)
        except OSError:
            pass
        for conn in self._peers.values():
            conn.close()
        for seg in self._segments:
            (SHM_DIR / seg.name).unlink(missing_ok=True)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------------------------ BAR and PCI
    def bar_read32(self, offset: int) -> int:
        return int.from_bytes(self.bar[offset:offset + 4], sys.byteorder)  # host order of the stored bytes

    def bar_write32(self, offset: int, value: int) -> None:
        self.bar[offset:offset + 4] = value.to_bytes(4, sys.byteorder)
        if offset == CMDQ_L:
            self._cmdq = (get(self.bar, (CMDQ_H, 0, 32)) << 32) | (get(self.bar, (CMDQ_L, 0, 32)) & ~0xFFF)
            put(self.bar, (CMDQ_L, 0, 12), 6)  # the size/stride bits are read-only
            put(self.bar, (INITIALIZING, 0, 32), 0)  # firmware is ready once it knows the queue
        elif offset == CMD_DBELL:
            bits = get(self.bar, (CMD_DBELL, 0, 32))
            if bits & ~1:
                self.faults.append(f"command doorbell for entries {bits:#x}: only entry 0 exists")
            if bits & 1:
                self._command(self._cmdq)

    def bar_write64(self, offset: int, value: int) -> None:
        raw = value.to_bytes(8, sys.byteorder)
        self.bar[offset:offset + 8] = raw
        uar, within = divmod(offset, PAGE)
        if within != 0x800 or uar not in self._uars:
            self.faults.append(f"64-bit write to BAR offset {offset:#x} is not a UAR doorbell")
            return
        qpn = get(raw, WQE_CTRL["qpn"])
        qp = self._qps.get(qpn)
        if qp is None or qp.uar != uar:
            self.faults.append(f"doorbell on UAR {uar} for unknown QP {qpn:#x}")
            return
        self._run_send_queue(qp)

    def pci_config_read(self, offset: int, size: int) -> int:
        config = bytearray(256)
        struct.pack_into("<HH", config, 0, 0x15B3, 0x101D)  # vendor Mellanox, device ConnectX-6 Dx
        return int.from_bytes(config[offset:offset + size], "little")

    # ------------------------------------------------------------------------------------ command queue
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
            out = bytes(out) + bytes(max(0, min(outlen, INLINE + BLOCK_DATA * len(out_blocks)) - len(out)))
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
                0x802: _alloc_uar, 0x800: _alloc_pd, 0x764: _query_gid, 0x200: _create_mkey, 0x301: _create_eq,
                0x400: _create_cq, 0x500: _create_qp, 0x502: _modify_qp, 0x503: _modify_qp, 0x504: _modify_qp,
                0x507: _modify_qp, 0x50A: _modify_qp, 0x50B: _query_qp}

    # ------------------------------------------------------------------------------------ queues
    def _queue_addr(self, pages: list[int], offset: int) -> int:
        return pages[offset // PAGE] + offset % PAGE

    def _write_cqe(self, cqn: int, opcode: int, qpn: int, counter: int, byte_count: int = 0, syndrome: int = 0,
                   wqe_opcode: int = 0) -> None:
        with self._lock:
            cq = self._cqs[cqn]
            consumer = get(self.mem(cq.dbr, 4), (0, 0, 24))
            if (cq.pi - consumer) & 0xFFFFFF >= 1 << cq.log_size:
                self.faults.append(f"CQ {cqn:#x} overflow: producer {cq.pi}, consumer {consumer}")
                return
            slot = cq.pi & ((1 << cq.log_size) - 1)
            cqe = self.mem(self._queue_addr(cq.pages, slot * CQE_SIZE), CQE_SIZE)
            body = bytearray(CQE_SIZE)
            struct.pack_into(">I", body, 44, byte_count)
            struct.pack_into(">I", body, 56, (wqe_opcode << 24) | qpn)
            struct.pack_into(">H", body, 60, counter & 0xFFFF)
            body[55] = syndrome
            owner = (cq.pi >> cq.log_size) & 1
            cqe[:63] = body[:63]
            cqe[63] = (opcode << 4) | owner  # the owner byte last: software may take the CQE after this
            cq.pi += 1

    def _lookup_key(self, key: int, pd: int, addr: int, length: int, need: str) -> tuple[Segment, int] | None:
        """The memory behind (key, addr, length) if the key allows ``need`` ("lr", "lw", "rw") in ``pd``."""
        mk = self._mkeys.get(key >> 8)
        if mk is None or mk.key != key & 0xFF or mk.pd != pd or not getattr(mk, need):
            return None
        if addr < mk.start or addr + length > mk.start + mk.length:
            return None
        return self._segment(addr, length)

    def _run_send_queue(self, qp: ModelQp) -> None:
        """Execute the send WQEs between our consumer index and the doorbell record's send counter."""
        packets: list[tuple] = []
        with self._lock:
            if qp.state not in (RTS, ERR):
                self.faults.append(f"send doorbell on QP {qp.qpn:#x} in state {qp.state}: ignored until RTS")
                return
            posted = get(self.mem(qp.dbr, 8), (4, 0, 16))
            sq_base = qp.rq_stride << qp.log_rq
            while qp.sq_ci & 0xFFFF != posted:
                slot = qp.sq_ci & ((1 << qp.log_sq) - 1)
                wqe = bytes(self.mem(self._queue_addr(qp.pages, sq_base + slot * BASIC_BLOCK), BASIC_BLOCK))
                qp.sq_ci += 1
                self.wqes_executed += 1
                packet = self._execute_wqe(qp, wqe)
                if packet is not None:
                    packets.append(packet)
        for packet in packets:  # outside the lock: the link may block until the peer reads
            try:
                self._send_packet(qp.remote_gid, packet)
            except OSError:  # the peer device is gone: retries are exhausted
                self._link_lost(qp.remote_gid)
                break

    def _execute_wqe(self, qp: ModelQp, wqe: bytes) -> tuple | None:
        """Check one send WQE and return the request packet for the peer (None: it completed locally)."""
        ctrl = {k: get(wqe, spec) for k, spec in WQE_CTRL.items()}
        index, opcode = ctrl["index"], ctrl["opcode"]
        signalled = bool(ctrl["fm_ce_se"] & 0x08)
        if qp.state == ERR:
            self._write_cqe(qp.cq_snd, CQE_REQ_ERR, qp.qpn, index, syndrome=WR_FLUSH, wqe_opcode=opcode)
            return None
        expected_ds = {SEND: 2, RDMA_WRITE: 3}.get(opcode)
        in_order = index == (qp.sq_ci - 1) & 0xFFFF
        if expected_ds is None or ctrl["ds"] != expected_ds or ctrl["qpn"] != qp.qpn or not in_order:
            self._local_error(qp, index, opcode, LOCAL_QP_OP)
            return None
        data_at = SEG if opcode == SEND else 2 * SEG
        length, lkey, addr = struct.unpack_from(">IIQ", wqe, data_at)
        src = self._lookup_key(lkey, qp.pd, addr, length, "lr")
        if src is None:
            self._local_error(qp, index, opcode, LOCAL_PROT)
            return None
        seg, off = src
        seq = next(qp.seq)
        qp.inflight[seq] = (index, signalled, opcode)
        if opcode == SEND:
            packet = ("SEND", qp.remote_qpn, qp.qpn, seq, seg.name, off, length)
        else:
            raddr, rkey = struct.unpack_from(">QI", wqe, SEG)
            packet = ("WRITE", qp.remote_qpn, qp.qpn, seq, seg.name, off, length, raddr, rkey)
        return packet

    def _local_error(self, qp: ModelQp, index: int, opcode: int, syndrome: int) -> None:
        qp.state = ERR
        self._write_cqe(qp.cq_snd, CQE_REQ_ERR, qp.qpn, index, syndrome=syndrome, wqe_opcode=opcode)

    # ------------------------------------------------------------------------------------ the wire
    def _socket_path(self, gid: bytes) -> Path:
        return self.fabric / f"{gid.hex()}.sock"

    def _send_packet(self, gid: bytes, packet: tuple) -> None:
        conn = self._peers.get(gid)
        if conn is None:
            conn = Client(str(self._socket_path(gid)), family="AF_UNIX")
            self._peers[gid] = conn
            threading.Thread(target=self._serve, args=(conn, gid), name="mlx5-model-peer", daemon=True).start()
        conn.send(packet)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="mlx5-model-link", daemon=True).start()

    def _serve(self, conn: Connection, gid: bytes | None = None) -> None:
        """Handle packets from one link, in order (RC: a QP's requests are served one after another).

        ``gid``: the peer this link sends our requests to; when it breaks, those requests fail."""
        while not self._closed:
            try:
                packet = conn.recv()
            except (EOFError, OSError):
                if gid is not None and not self._closed:
                    self._link_lost(gid)
                return
            try:
                if packet[0] == "ACK":
                    self._on_ack(*packet[1:])
                else:
                    conn.send(("ACK", packet[2], packet[3], self._on_request(packet)))
            except Exception as e:  # the device must not die silently: record it for the tests
                self.faults.append(f"model error on {packet[0]}: {e!r}")

    def _link_lost(self, gid: bytes) -> None:
        """The device at ``gid`` stopped answering: requests to it complete with TRANSPORT_RETRY_EXC_ERR."""
        with self._lock:
            conn = self._peers.pop(gid, None)
            if conn is not None:
                conn.close()
            for qp in self._qps.values():
                if qp.remote_gid != gid or qp.state == ERR:
                    continue
                qp.state = ERR
                for index, _signalled, opcode in qp.inflight.values():
                    self._write_cqe(qp.cq_snd, CQE_REQ_ERR, qp.qpn, index, syndrome=TRANSPORT_RETRY_EXC,
                                    wqe_opcode=opcode)
                qp.inflight.clear()

    def _attach(self, name: str) -> mmap.mmap:
        mm = self._attached.get(name)
        if mm is None:
            with open(SHM_DIR / name, "r+b") as f:
                mm = mmap.mmap(f.fileno(), 0)
            self._attached[name] = mm
        return mm

    def _on_request(self, packet: tuple) -> int:
        """Serve a SEND or RDMA_WRITE from the peer; returns 0 (ACK) or the requester's error syndrome."""
        kind, qpn, _src_qpn, _seq, name, off, length = packet[:7]
        qp = self._qps.get(qpn)
        if qp is None:
            return REMOTE_INVAL_REQ
        deadline = time.monotonic() + self.rnr_timeout
        while qp.state in (RST, INIT):  # not ready to receive: the requester retries (transport retry)
            if time.monotonic() > deadline or self._closed:
                return TRANSPORT_RETRY_EXC
            time.sleep(0.0005)
        if qp.state not in (RTR, RTS):
            return REMOTE_INVAL_REQ
        payload = memoryview(self._attach(name))[off:off + length]
        if kind == "WRITE":
            raddr, rkey = packet[7:9]
            with self._lock:
                dst = self._lookup_key(rkey, qp.pd, raddr, length, "rw") if qp.rwe else None
            if dst is None:
                return REMOTE_ACCESS
            seg, at = dst
            seg.mm[at:at + length] = payload  # the DMA
            return 0
        deadline = time.monotonic() + self.rnr_timeout
        while True:  # RNR: wait for a receive WQE
            posted = get(self.mem(qp.dbr, 4), (0, 0, 16))
            if qp.rq_ci & 0xFFFF != posted:
                break
            if time.monotonic() > deadline or self._closed:
                return RNR_RETRY_EXC
            time.sleep(0.00005)
        slot = qp.rq_ci & ((1 << qp.log_rq) - 1)
        wqe = bytes(self.mem(self._queue_addr(qp.pages, slot * qp.rq_stride), SEG))
        room, lkey, addr = struct.unpack_from(">IIQ", wqe, 0)
        index = qp.rq_ci & 0xFFFF
        qp.rq_ci += 1
        if length > room:
            self._write_cqe(qp.cq_rcv, CQE_RESP_ERR, qp.qpn, index, syndrome=LOCAL_LENGTH)
            return REMOTE_INVAL_REQ
        with self._lock:
            dst = self._lookup_key(lkey, qp.pd, addr, length, "lw")
        if dst is None:
            self._write_cqe(qp.cq_rcv, CQE_RESP_ERR, qp.qpn, index, syndrome=LOCAL_PROT)
            return REMOTE_OP
        seg, at = dst
        seg.mm[at:at + length] = payload  # the DMA
        self._write_cqe(qp.cq_rcv, CQE_RESP_SEND, qp.qpn, index, byte_count=length)
        return 0

    def _on_ack(self, qpn: int, seq: int, syndrome: int) -> None:
        with self._lock:
            qp = self._qps.get(qpn)
            if qp is None or seq not in qp.inflight:
                self.faults.append(f"ACK for unknown request {seq} of QP {qpn:#x}")
                return
            index, signalled, opcode = qp.inflight.pop(seq)
            if syndrome:
                qp.state = ERR
                self._write_cqe(qp.cq_snd, CQE_REQ_ERR, qp.qpn, index, syndrome=syndrome, wqe_opcode=opcode)
            elif signalled:
                self._write_cqe(qp.cq_snd, CQE_REQ, qp.qpn, index)
