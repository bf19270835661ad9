"""The device model's own reading of the PRM: field tables, status codes, syndromes, state records.

In:  the ConnectX PRM (command layouts, command queue entry and mailbox, WQE and CQE formats).
Out: tables of ``(byte offset of the big-endian dword, low bit, width)`` per field, ``get``/``put`` on them,
     the codes the model answers with, and the records it keeps per memory key, CQ and QP.

Written separately from the driver's ``tg_mlx_rdma.mlx5.prm`` (and in another form) on purpose: the tests
check both against the headers and each other.
"""
from __future__ import annotations

import itertools
import mmap
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAGE = 4096
SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())

# ----------------------------------------------------------------------------------------------- field tables
# (byte offset of the big-endian dword holding the field, lowest bit inside that dword, width in bits);
# width 64 = a big-endian u64 at that byte offset. Written from the PRM's tables.
F = tuple[int, int, int]
OPCODE: F = (0x00, 16, 16)
OP_MOD: F = (0x04, 0, 16)
QPN_IN: F = (0x08, 0, 24)  # modify/query QP: the QP number
MKEY_IN: F = (0x08, 0, 24)  # DESTROY_MKEY: the mkey index
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
    "unreachable gid": 0x0B0A0015, "already initialized": 0x0B0A0016, "bad mkey": 0x0B0A0017,
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
    """Memory the device reaches: shared memory it allocated (``name`` its file: a peer model reads it there), or
    process memory mapped for it (``map_dma``; ``name`` empty: payloads from it travel with the request)."""
    base: int
    size: int
    name: str
    mm: mmap.mmap | memoryview


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
