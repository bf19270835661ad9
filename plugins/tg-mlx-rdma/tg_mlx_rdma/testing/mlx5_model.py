"""A software ConnectX (mlx5) device, written from the PRM, for testing the driver without hardware.

The command interface is in ``mlx5_model_commands``, the tables in ``mlx5_model_tables``; this module is the
device: memory, BAR, send/receive queues, CQEs and the wire.

In:  the driver's accesses through the ``HardwareAccess`` interface: BAR reads/writes (init segment,
     command doorbell, UAR doorbells), DMA memory it allocates from the model.
Out: what a device would do: serve the command queue, keep HCA/QP state, execute send WQEs when the
     UAR doorbell rings, take receive WQEs from the doorbell record, move the bytes to the peer device
     (another model, usually in another process) and write CQEs with the owner bit and WQE counter.

This model deliberately does NOT import the driver's layouts (``tg_mlx_rdma.mlx5.prm``): its field
tables (``mlx5_model_tables``) are written separately from the PRM as (byte offset of the big-endian dword,
low bit, width), so the tests cross-check two independent readings of the manual (and both against the
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

import atexit
import itertools
import mmap
import os
import queue
import struct
import sys
import threading
import time
import zlib
from bisect import bisect_right
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

from tg_mlx_rdma.mlx5.hw import DmaBuffer, HardwareAccess
from tg_mlx_rdma.testing.mlx5_model_commands import CommandProcessor
from tg_mlx_rdma.testing.mlx5_model_tables import *  # noqa: F403  (the tables are part of this module's API)
from tg_mlx_rdma.testing.mlx5_model_tables import (
    BASIC_BLOCK,
    CAPS,
    CMD_DBELL,
    CMDIF_REV_FW_SUB,
    CMDQ_H,
    CMDQ_L,
    CQE_REQ,
    CQE_REQ_ERR,
    CQE_RESP_ERR,
    CQE_RESP_SEND,
    CQE_SIZE,
    ERR,
    FW_REV,
    INIT,
    INITIALIZING,
    LOCAL_LENGTH,
    LOCAL_PROT,
    LOCAL_QP_OP,
    PAGE,
    RDMA_WRITE,
    REMOTE_ACCESS,
    REMOTE_INVAL_REQ,
    REMOTE_OP,
    RNR_RETRY_EXC,
    RST,
    RTR,
    RTS,
    SEG,
    SEND,
    SHM_DIR,
    TRANSPORT_RETRY_EXC,
    WQE_CTRL,
    WR_FLUSH,
    MKey,
    ModelCq,
    ModelFault,
    ModelQp,
    Segment,
    get,
    put,
)

UNIX_PATH_MAX = 108  # sun_path's size on Linux (a path may fill it: no terminating zero needed)


def _sweep_dead_segments() -> None:
    """Unlink the shared memory of model devices whose process died without closing them (killed)."""
    for path in SHM_DIR.glob("tg-mlx5-*-*"):
        try:
            pid = int(path.name.split("-")[2])
            os.kill(pid, 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (ValueError, IndexError, PermissionError, OSError):
            continue


class Mlx5Model(CommandProcessor, HardwareAccess):
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
        self._outboxes: dict[bytes, queue.SimpleQueue[tuple]] = {}
        self._attached: dict[str, mmap.mmap] = {}
        self._closed = False
        self.wqes_executed = 0
        _sweep_dead_segments()
        self._listener = Listener(str(self._socket_path(self.gid)), family="AF_UNIX")
        threading.Thread(target=self._accept_loop, name="mlx5-model-accept", daemon=True).start()
        atexit.register(self.close)  # shared memory outlives the process unless unlinked

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

    def map_dma(self, view: memoryview) -> DmaBuffer:
        """Process memory (a tensor's) at a fresh range of this model's bus addresses; the device reads and writes
        ``view`` itself. A payload sent from it travels with the request (the peer model cannot map it)."""
        mv = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        with self._lock:
            seg = Segment(self._next, max(mv.nbytes, 1), "", mv)
            self._segments.append(seg)
            self._bases.append(seg.base)
            self._next += -(-seg.size // PAGE) * PAGE + PAGE  # (a guard gap, as for dma_alloc)
        return DmaBuffer(mv, seg.base, mv.nbytes, seg)

    def unmap_dma(self, buf: DmaBuffer) -> None:
        with self._lock:
            i = self._bases.index(buf.addr)
            del self._segments[i], self._bases[i]

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
        atexit.unregister(self.close)
        try:
            self._listener.close()
            self._socket_path(self.gid).unlink(missing_ok=True)
        except OSError:
            pass
        for conn in self._peers.values():
            conn.close()
        for seg in self._segments:
            if seg.name:
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
        if packets:  # one message per doorbell, outside the lock: the link may block until the peer reads
            try:
                self._send_packet(qp.remote_gid, ("REQUESTS", packets))
            except OSError:  # the peer device is gone: retries are exhausted
                self._link_lost(qp.remote_gid)

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
        where: str | bytes = seg.name
        if not where:  # mapped process memory: the payload is read now and goes with the request
            where, off = bytes(seg.mm[off:off + length]), 0
        packet: tuple
        if opcode == SEND:
            packet = ("SEND", qp.remote_qpn, qp.qpn, seq, where, off, length)
        else:
            raddr, rkey = struct.unpack_from(">QI", wqe, SEG)
            packet = ("WRITE", qp.remote_qpn, qp.qpn, seq, where, off, length, raddr, rkey)
        return packet

    def _local_error(self, qp: ModelQp, index: int, opcode: int, syndrome: int) -> None:
        qp.state = ERR
        self._write_cqe(qp.cq_snd, CQE_REQ_ERR, qp.qpn, index, syndrome=syndrome, wqe_opcode=opcode)

    # ------------------------------------------------------------------------------------ the wire
    def _socket_path(self, gid: bytes) -> Path:
        path = self.fabric / f"{gid.hex()}.sock"
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            raise ValueError(f"the fabric directory {str(self.fabric)!r} is too long for a unix socket path "
                             f"({len(os.fsencode(path))} of at most {UNIX_PATH_MAX} bytes): use a shorter one")
        return path

    def _send_packet(self, gid: bytes, packet: tuple) -> None:
        """Queue ``packet`` for the device at ``gid``: a thread per link sends them in order, so a doorbell never
        waits for the peer (whose link thread may itself wait for a receive, RNR, while a big payload is on its
        way: a mapped memory's payload travels with its request)."""
        conn = self._peers.get(gid)
        if conn is None:
            conn = Client(str(self._socket_path(gid)), family="AF_UNIX")
            self._peers[gid] = conn
            outbox: queue.SimpleQueue[tuple] = queue.SimpleQueue()
            self._outboxes[gid] = outbox
            threading.Thread(target=self._serve, args=(conn, gid), name="mlx5-model-peer", daemon=True).start()
            threading.Thread(target=self._send_loop, args=(conn, gid, outbox), name="mlx5-model-out",
                             daemon=True).start()
        self._outboxes[gid].put(packet)

    def _send_loop(self, conn: Connection, gid: bytes, outbox: queue.SimpleQueue[tuple]) -> None:
        while not self._closed:
            packet = outbox.get()
            try:
                conn.send(packet)
            except OSError:  # the peer device is gone: retries are exhausted
                if not self._closed:
                    self._link_lost(gid)
                return

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
                kind, items = packet
                if kind == "ACKS":
                    for ack in items:
                        self._on_ack(*ack)
                else:  # requests, served in order; one answer with an ACK or NAK for each
                    conn.send(("ACKS", [(p[2], p[3], self._on_request(p)) for p in items]))
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
        payload = memoryview(self._attach(name) if isinstance(name, str) else name)[off:off + length]
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
