"""The mlx5 driver: HCA bring-up, protection domain, memory keys, CQs, RC queue pairs, work requests.

In:  a ``HardwareAccess`` (the real NIC through ``SysfsPci``, or the device model).
Out: ``Mlx5Device``: ``alloc_pd``, ``reg_mr``/``dereg_mr``, ``create_cq``, ``create_qp``; ``QueuePair``: ``connect``
     (RST->INIT->RTR->RTS), ``post_send`` (SEND, RDMA_WRITE), ``post_recv``, ``ring``;
     ``CompletionQueue.poll``: completions, with error CQEs raised as ``CompletionError``.

Bring-up (PRM "HCA Driver Start-up"): read the firmware version and the command interface revision
from the init segment, give the device the command queue's address, wait for the initializing bit to
clear, then ENABLE_HCA, QUERY_ISSI/SET_ISSI, QUERY_PAGES(boot)/MANAGE_PAGES, QUERY_HCA_CAP/SET_HCA_CAP,
QUERY_PAGES(init)/MANAGE_PAGES, INIT_HCA; then ALLOC_UAR, an EQ and the port's GID.

Memory keys use physical-address mode over the buffer's bus range (``DmaBuffer`` memory is contiguous
in bus address space: VFIO's IOVA, the model's arena), so no translation tables are built.

Queues: a QP buffer holds the receive queue (16-byte strides, one data segment) and then the send queue
(64-byte basic blocks). A doorbell record holds the receive counter (word 0) and send counter (word 1);
posting sends writes the send counter and then the first 8 bytes of the last WQE's control segment to
the UAR doorbell. CQEs are polled by the owner bit: the entry at consumer index ``ci`` is software's
when its owner bit equals ``(ci >> log_size) & 1`` (the ring wraps, the expected bit flips).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tg_mlx_rdma.endian import from_be32, to_be32, to_be64
from tg_mlx_rdma.mlx5 import prm
from tg_mlx_rdma.mlx5.cmdq import CommandQueue
from tg_mlx_rdma.mlx5.hw import DmaBuffer, HardwareAccess, HardwareError
from tg_mlx_rdma.record import Record

__all__ = ["Completion", "CompletionError", "CompletionQueue", "MemoryRegion", "Mlx5Device", "QpInfo", "QueueFull",
           "QueuePair"]

PAGE = 4096


class QueueFull(RuntimeError):
    """A work request was posted to a queue with no free slot."""


class CompletionError(RuntimeError):
    """An error CQE: the work request failed; ``syndrome`` says why (PRM CQE syndromes)."""

    def __init__(self, qpn: int, wqe_counter: int, opcode: int, syndrome: int, vendor: int) -> None:
        self.qpn, self.wqe_counter, self.cqe_opcode, self.syndrome, self.vendor_syndrome = (
            qpn, wqe_counter, opcode, syndrome, vendor)
        side = "send" if opcode == prm.CQE_REQ_ERR else "receive"
        name = prm.CQE_SYNDROMES.get(syndrome, "unknown syndrome")
        super().__init__(f"mlx5 {side} work request {wqe_counter} on QP {qpn:#x} failed: {name} ({syndrome:#x}), "
                         f"vendor syndrome {vendor:#x}")


@dataclass(frozen=True)
class QpInfo:
    """What the peer needs to connect to a QP (exchanged over MPI or TCP)."""

    qpn: int
    gid: bytes
    lid: int = 0
    psn: int = 0


@dataclass(frozen=True)
class MemoryRegion:
    buf: DmaBuffer
    lkey: int
    rkey: int

    @property
    def addr(self) -> int:
        return self.buf.addr

    @property
    def length(self) -> int:
        return self.buf.size


@dataclass(frozen=True)
class Completion:
    opcode: int  # prm.CQE_REQ (a send finished) or prm.CQE_RESP_SEND (a message arrived)
    qpn: int
    wqe_counter: int
    byte_count: int


def _pages(buf: DmaBuffer) -> bytes:
    """The buffer's 4 KiB page addresses as big-endian u64s (a PRM page list)."""
    return b"".join((buf.addr + off).to_bytes(8, "big") for off in range(0, buf.size, PAGE))


class Mlx5Device:
    """One HCA, brought up on construction."""

    INIT_TIMEOUT = 10.0

    def __init__(self, hw: HardwareAccess) -> None:
        self.hw = hw
        self._keep: list[DmaBuffer] = []
        self.qps: dict[int, QueuePair] = {}
        self._key_byte = 0
        self._check_firmware()
        self.cmdq = CommandQueue(hw)
        self.cmdq.publish_address()
        self._wait_ready()
        self._start_hca()
        self.uar = self.run(prm.AllocUarIn(), prm.AllocUarOut, "ALLOC_UAR").uar
        self.eqn = self._create_eq()
        self.gid = self._query_gid()

    # ------------------------------------------------------------------------------------ bring-up
    def _check_firmware(self) -> None:
        fw = from_be32(self.hw.bar_read32(prm.INIT_FW_REV))
        rev = from_be32(self.hw.bar_read32(prm.INIT_CMDIF_REV_FW_SUB))
        self.fw_version = (fw & 0xFFFF, fw >> 16, rev & 0xFFFF)
        cmdif = rev >> 16
        if cmdif != prm.CMDIF_REV:
            raise HardwareError(f"mlx5: command interface revision {cmdif}, this driver speaks {prm.CMDIF_REV} "
                                f"(firmware {'.'.join(map(str, self.fw_version))})")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.INIT_TIMEOUT
        while from_be32(self.hw.bar_read32(prm.INIT_INITIALIZING)) >> 31:
            if time.monotonic() > deadline:
                raise HardwareError(f"mlx5: firmware still initializing after {self.INIT_TIMEOUT:g} s")
            time.sleep(0.001)

    def _start_hca(self) -> None:
        self.run(prm.EnableHcaIn(), prm.CmdOut, "ENABLE_HCA")
        issi = self.run(prm.QueryIssiIn(), prm.QueryIssiOut, "QUERY_ISSI")
        if not issi.supported_issi_dw0 >> prm.ISSI_1 & 1:
            raise HardwareError(f"mlx5: firmware does not support ISSI 1 (supported mask {issi.supported_issi_dw0:#x})")
        self.run(prm.SetIssiIn(current_issi=prm.ISSI_1), prm.CmdOut, "SET_ISSI")
        self._give_pages(prm.QUERY_PAGES_BOOT)
        self._set_caps()
        self._give_pages(prm.QUERY_PAGES_INIT)
        self.run(prm.InitHcaIn(), prm.CmdOut, "INIT_HCA")

    def _give_pages(self, which: int) -> None:
        """QUERY_PAGES(which) then MANAGE_PAGES(give) with that many pages of our memory."""
        n = self.run(prm.QueryPagesIn(op_mod=which), prm.QueryPagesOut, "QUERY_PAGES").num_pages
        if n <= 0:
            return
        buf = self._dma(n * PAGE)
        cmd = prm.ManagePagesIn(op_mod=prm.MANAGE_PAGES_GIVE, input_num_entries=n)
        self.run(cmd, prm.CmdOut, "MANAGE_PAGES", extra=_pages(buf))

    def _set_caps(self) -> None:
        """Read the general capabilities (maximum and current) and set the current ones we rely on."""
        out_bits = 8 * (prm.HCA_CAP_OFFSET + prm.HCA_CAP_SIZE)
        raw = {}
        for current in (0, 1):
            cmd = prm.QueryHcaCapIn(opcode=prm.OPCODES["QUERY_HCA_CAP"], op_mod=(prm.HCA_CAP_GENERAL << 1) | current)
            data = self.cmdq.execute("QUERY_HCA_CAP", bytes(cmd), out_bits // 8)
            raw[current] = data[prm.HCA_CAP_OFFSET:]
        self.max_caps = prm.HcaCap(raw[0])
        caps = prm.HcaCap(raw[1])
        caps.cmdif_checksum = 0  # we sign every entry and block anyway
        caps.log_max_qp = self.max_caps.log_max_qp
        head = prm.CmdIn(opcode=prm.OPCODES["SET_HCA_CAP"], op_mod=prm.HCA_CAP_GENERAL << 1)
        self.cmdq.execute("SET_HCA_CAP", bytes(head) + bytes(caps), 16)
        self.caps = caps

    def _create_eq(self) -> int:
        buf = self._dma(64 << 6)
        np.frombuffer(buf.view, np.uint8)[63::64] = 0x01  # EQE owner bits: not yet written by hardware
        cmd = prm.CreateEqIn()
        cmd.eq_context_entry__log_eq_size = 6
        cmd.eq_context_entry__uar_page = self.uar
        return self.run(cmd, prm.CreateEqOut, "CREATE_EQ", extra=_pages(buf)).eq_number

    def _query_gid(self) -> bytes:
        cmd = prm.QueryGidIn(opcode=prm.OPCODES["QUERY_HCA_VPORT_GID"], port_num=1, gid_index=0)
        out = self.cmdq.execute("QUERY_HCA_VPORT_GID", bytes(cmd), prm.QUERY_GID_GID + 16)
        return out[prm.QUERY_GID_GID:prm.QUERY_GID_GID + 16]

    # ------------------------------------------------------------------------------------ commands
    def run(self, cmd: Record, out_layout: type[Record], name: str | None = None, extra: bytes = b"") -> Record:
        """Run a command record (its opcode filled in from ``name``); return the output record."""
        name = name or type(cmd).__name__
        cmd.opcode = prm.OPCODES[name]  # type: ignore[attr-defined]
        return out_layout(self.cmdq.execute(name, bytes(cmd) + extra, out_layout.SIZE))

    def _dma(self, size: int) -> DmaBuffer:
        buf = self.hw.dma_alloc(size)
        self._keep.append(buf)
        return buf

    # ------------------------------------------------------------------------------------ objects
    def alloc_pd(self) -> int:
        return self.run(prm.AllocPdIn(), prm.AllocPdOut, "ALLOC_PD").pd

    def alloc(self, size: int) -> DmaBuffer:
        """DMA memory for data (register it with ``reg_mr``)."""
        return self._dma(size)

    def reg_mr(self, pd: int, buf: DmaBuffer, remote_write: bool = True, local_write: bool = True) -> MemoryRegion:
        """A memory key over all of ``buf``: local read always, local/remote write as asked, remote read."""
        self._key_byte = (self._key_byte + 0x3D) & 0xFF
        cmd = prm.CreateMkeyIn()
        mkc = "memory_key_mkey_entry__"
        for name, value in (("lr", 1), ("lw", int(local_write)), ("rr", 1), ("rw", int(remote_write)),
                            ("access_mode_1_0", prm.ACCESS_MODE_PA), ("qpn", 0xFFFFFF), ("mkey_7_0", self._key_byte),
                            ("pd", pd), ("start_addr", buf.addr), ("len", buf.size)):
            setattr(cmd, mkc + name, value)
        index = self.run(cmd, prm.CreateMkeyOut, "CREATE_MKEY").mkey_index
        key = (index << 8) | self._key_byte
        return MemoryRegion(buf, key, key)

    def dereg_mr(self, mr: MemoryRegion) -> None:
        """Destroy ``mr``'s memory key (DESTROY_MKEY): the device refuses it from now on."""
        self.run(prm.DestroyMkeyIn(mkey_index=mr.lkey >> 8), prm.CmdOut, "DESTROY_MKEY")

    def create_cq(self, log_size: int) -> CompletionQueue:
        if not 0 <= log_size <= self.max_caps.log_max_cq_sz:
            raise ValueError(f"CQ size 2**{log_size} exceeds the device's 2**{self.max_caps.log_max_cq_sz}")
        buf = self._dma(64 << log_size)
        dbr = self._dma(64)
        np.frombuffer(buf.view, np.uint8)[63::64] = (prm.CQE_INVALID << 4) | 1  # nothing valid yet
        cmd = prm.CreateCqIn()
        cmd.cq_context__log_cq_size = log_size
        cmd.cq_context__uar_page = self.uar
        cmd.cq_context__c_eqn_or_apu_element = self.eqn
        cmd.cq_context__dbr_addr = dbr.addr
        cqn = self.run(cmd, prm.CreateCqOut, "CREATE_CQ", extra=_pages(buf)).cqn
        return CompletionQueue(self, cqn, log_size, buf, dbr)

    def create_qp(self, pd: int, send_cq: CompletionQueue, recv_cq: CompletionQueue, log_sq: int = 8,
                  log_rq: int = 8) -> QueuePair:
        limit = self.max_caps.log_max_qp_sz
        if not (0 <= log_sq <= limit and 0 <= log_rq <= limit):
            raise ValueError(f"queue sizes 2**{log_sq}, 2**{log_rq} exceed the device's 2**{limit}")
        rq_bytes = (1 << log_rq) * prm.DataSeg.SIZE
        buf = self._dma(rq_bytes + (prm.WQEBB << log_sq))
        dbr = self._dma(64)
        cmd = prm.CreateQpIn()
        for name, value in (("st", prm.QP_ST_RC), ("pm_state", prm.PM_MIGRATED), ("pd", pd),
                            ("log_rq_size", log_rq), ("log_rq_stride", 0), ("log_sq_size", log_sq),
                            ("uar_page", self.uar), ("cqn_snd", send_cq.cqn), ("cqn_rcv", recv_cq.cqn),
                            ("dbr_addr", dbr.addr)):
            setattr(cmd, "qpc__" + name, value)
        qpn = self.run(cmd, prm.CreateQpOut, "CREATE_QP", extra=_pages(buf)).qpn
        qp = QueuePair(self, qpn, pd, log_sq, log_rq, buf, dbr, rq_bytes)
        self.qps[qpn] = qp
        return qp

    def close(self) -> None:
        self.hw.close()


class CompletionQueue:
    """A CQ of 64-byte CQEs polled by owner bit; the consumer index goes to the doorbell record."""

    def __init__(self, dev: Mlx5Device, cqn: int, log_size: int, buf: DmaBuffer, dbr: DmaBuffer) -> None:
        self.dev, self.cqn, self.log_size, self.buf = dev, cqn, log_size, buf
        self.size = 1 << log_size
        self.ci = 0
        self._dbr = np.frombuffer(dbr.view, dtype=np.uint32)
        self._op_own = np.frombuffer(buf.view, dtype=np.uint8)[63::64]

    def poll(self, max_entries: int = 64) -> list[Completion]:
        """Completions ready now (in order); an error CQE raises ``CompletionError`` (it is consumed)."""
        done: list[Completion] = []
        while len(done) < max_entries:
            slot = self.ci & (self.size - 1)
            op_own = int(self._op_own[slot])
            if op_own >> 4 == prm.CQE_INVALID or (op_own & 1) != (self.ci >> self.log_size) & 1:
                break
            cqe = prm.Cqe64(self.buf.view, slot * 64)
            self.ci += 1
            self._dbr[0] = to_be32(self.ci & 0xFFFFFF)
            qp = self.dev.qps.get(cqe.qpn)
            if cqe.opcode in (prm.CQE_REQ_ERR, prm.CQE_RESP_ERR):
                if qp is not None:
                    qp.retire(cqe.opcode == prm.CQE_REQ_ERR, cqe.wqe_counter)
                raise CompletionError(cqe.qpn, cqe.wqe_counter, cqe.opcode, cqe.syndrome, cqe.vendor_err_synd)
            c = Completion(cqe.opcode, cqe.qpn, cqe.wqe_counter, cqe.byte_cnt)
            if qp is not None:
                qp.retire(c.opcode == prm.CQE_REQ, c.wqe_counter)
            done.append(c)
        return done

    def wait(self, count: int = 1, timeout: float = 60.0) -> list[Completion]:
        """Poll until ``count`` completions arrived (``TimeoutError`` after ``timeout`` seconds)."""
        got: list[Completion] = []
        deadline = time.monotonic() + timeout
        idle = 0
        while len(got) < count:
            new = self.poll(count - len(got))
            got += new
            idle = 0 if new else idle + 1
            if idle:
                # yield the interpreter lock: a device model runs in threads of this process
                time.sleep(0 if idle < 1000 else 0.0001)
                if idle % 256 == 0 and time.monotonic() > deadline:
                    raise TimeoutError(f"mlx5 CQ {self.cqn:#x}: {len(got)} of {count} completions within {timeout:g} s")
        return got


class QueuePair:
    """An RC queue pair."""

    def __init__(self, dev: Mlx5Device, qpn: int, pd: int, log_sq: int, log_rq: int, buf: DmaBuffer,
                 dbr: DmaBuffer, sq_offset: int) -> None:
        self.dev, self.qpn, self.pd, self.buf = dev, qpn, pd, buf
        self.sq_size, self.rq_size = 1 << log_sq, 1 << log_rq
        self.sq_offset = sq_offset
        self._dbr = np.frombuffer(dbr.view, dtype=np.uint32)
        self.sq_head = self.sq_tail = 0  # posted / completed send WQEs (unwrapped)
        self.rq_head = self.rq_tail = 0
        self._last_ctrl = b""
        self.psn = 0

    def info(self) -> QpInfo:
        return QpInfo(self.qpn, self.dev.gid, 0, self.psn)

    # ------------------------------------------------------------------------------------ state
    def transition(self, name: str, remote: QpInfo | None = None) -> None:
        """Run one state transition command (RST2INIT_QP, INIT2RTR_QP, RTR2RTS_QP, 2ERR_QP)."""
        layouts = {"RST2INIT_QP": prm.Rst2InitIn, "INIT2RTR_QP": prm.Init2RtrIn, "RTR2RTS_QP": prm.Rtr2RtsIn,
                   "2ERR_QP": prm.Qp2ErrIn}
        cmd = layouts[name](qpn=self.qpn)
        if name == "RST2INIT_QP":
            for field, value in (("pm_state", prm.PM_MIGRATED), ("primary_address_path__vhca_port_num", 1),
                                 ("rre", 1), ("rwe", 1)):
                setattr(cmd, "qpc__" + field, value)
        elif name == "INIT2RTR_QP":
            if remote is None:
                raise ValueError("INIT2RTR_QP needs the remote QP's info")
            for field, value in (("mtu", prm.MTU_4096), ("log_msg_max", 30), ("remote_qpn", remote.qpn),
                                 ("primary_address_path__grh", 1), ("primary_address_path__rlid", remote.lid),
                                 ("next_rcv_psn", remote.psn), ("min_rnr_nak", 1), ("log_rra_max", 4)):
                setattr(cmd, "qpc__" + field, value)
            cmd.qpc__primary_address_path__rgid_rip = remote.gid
        elif name == "RTR2RTS_QP":
            for field, value in (("retry_count", 7), ("rnr_retry", 7), ("next_send_psn", self.psn),
                                 ("primary_address_path__ack_timeout", 14), ("log_sra_max", 4)):
                setattr(cmd, "qpc__" + field, value)
        out_cls = prm.CmdOut
        self.dev.run(cmd, out_cls, name)

    def connect(self, remote: QpInfo) -> None:
        """RST -> INIT -> RTR -> RTS towards ``remote``."""
        self.transition("RST2INIT_QP")
        self.transition("INIT2RTR_QP", remote)
        self.transition("RTR2RTS_QP")

    def state(self) -> str:
        out = self.dev.run(prm.QueryQpIn(qpn=self.qpn), prm.QueryQpOut, "QUERY_QP")
        return prm.QP_STATES.get(out.qpc__state, f"state {out.qpc__state}")

    # ------------------------------------------------------------------------------------ work requests
    def retire(self, send: bool, wqe_counter: int) -> None:
        """A CQE for WQE ``wqe_counter`` (16 bits): it and everything before it are done."""
        if send:
            self.sq_tail += ((wqe_counter - self.sq_tail) & 0xFFFF) + 1
        else:
            self.rq_tail += 1

    @property
    def send_slots(self) -> int:
        return self.sq_size - (self.sq_head - self.sq_tail)

    @property
    def recv_slots(self) -> int:
        return self.rq_size - (self.rq_head - self.rq_tail)

    def post_send(self, opcode: str, mr: MemoryRegion, offset: int, length: int, *, remote_addr: int = 0,
                  rkey: int = 0, signaled: bool = True, ring: bool = True) -> int:
        """Write one SEND or RDMA_WRITE WQE for ``length`` bytes at ``mr.addr + offset``; return its index."""
        if opcode not in prm.WQE_OPCODES:
            raise ValueError(f"unknown work request {opcode!r}; use one of {', '.join(prm.WQE_OPCODES)}")
        if self.send_slots <= 0:
            raise QueueFull(f"send queue of QP {self.qpn:#x} is full ({self.sq_size} WQEs outstanding): poll the CQ")
        index = self.sq_head & 0xFFFF
        at = self.sq_offset + (self.sq_head & (self.sq_size - 1)) * prm.WQEBB
        self.buf.view[at:at + prm.WQEBB] = bytes(prm.WQEBB)
        segs = 2 if opcode == "SEND" else 3
        ctrl = prm.CtrlSeg(self.buf.view, at, opcode=prm.WQE_OPCODES[opcode], wqe_index=index, qpn=self.qpn,
                           ds=segs, fm_ce_se=prm.CE_CQE_ALWAYS if signaled else 0)
        data_at = at + prm.CtrlSeg.SIZE
        if opcode == "RDMA_WRITE":
            prm.RaddrSeg(self.buf.view, data_at, raddr=remote_addr, rkey=rkey)
            data_at += prm.RaddrSeg.SIZE
        prm.DataSeg(self.buf.view, data_at, byte_count=length, lkey=mr.lkey, addr=mr.addr + offset)
        self.sq_head += 1
        self._last_ctrl = bytes(ctrl.buffer[:8])
        if ring:
            self.ring()
        return index

    def ring(self) -> None:
        """Publish the send counter in the doorbell record, then ring the UAR doorbell with the last WQE."""
        if not self._last_ctrl:
            return
        self._dbr[1] = to_be32(self.sq_head & 0xFFFF)
        db = self.dev.uar * prm.UAR_PAGE_SIZE + prm.UAR_DB_OFFSET
        self.dev.hw.bar_write64(db, to_be64(int.from_bytes(self._last_ctrl, "big")))
        self._last_ctrl = b""

    def post_recv(self, mr: MemoryRegion, offset: int, length: int) -> int:
        """One receive WQE (a single data segment) for up to ``length`` bytes at ``mr.addr + offset``."""
        if self.recv_slots <= 0:
            raise QueueFull(f"receive queue of QP {self.qpn:#x} is full ({self.rq_size} receives posted)")
        index = self.rq_head & 0xFFFF
        at = (self.rq_head & (self.rq_size - 1)) * prm.DataSeg.SIZE
        prm.DataSeg(self.buf.view, at, byte_count=length, lkey=mr.lkey, addr=mr.addr + offset)
        self.rq_head += 1
        self._dbr[0] = to_be32(self.rq_head & 0xFFFF)
        return index
