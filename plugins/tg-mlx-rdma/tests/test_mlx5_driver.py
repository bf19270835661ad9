"""The mlx5 driver against the device model in one process: bring-up, commands and their errors, loopback WQEs."""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tg_mlx_rdma.mlx5 import prm
from tg_mlx_rdma.mlx5.cmdq import CommandDeliveryError, CommandError, CommandQueue
from tg_mlx_rdma.mlx5.device import CompletionError, MemoryRegion, Mlx5Device, QueueFull
from tg_mlx_rdma.mlx5.hw import HardwareError
from tg_mlx_rdma.testing import mlx5_model as model
from tg_mlx_rdma.testing.mlx5_model import Mlx5Model


@pytest.fixture
def hw() -> Iterator[Mlx5Model]:
    # (a short directory: under pytest's tmp_path the sockets' paths can pass the 108 bytes a unix socket allows)
    with tempfile.TemporaryDirectory(prefix="mlx5-") as fabric:
        m = Mlx5Model(fabric)
        yield m
        m.close()


@pytest.fixture
def dev(hw: Mlx5Model) -> Mlx5Device:
    return Mlx5Device(hw)


def test_bring_up(hw: Mlx5Model, dev: Mlx5Device) -> None:
    assert dev.fw_version == (22, 39, 1002)
    assert dev.gid == hw.gid
    assert hw._initialized and hw._issi == 1
    assert hw._pages_given == model.BOOT_PAGES + model.INIT_PAGES
    # QUERY_HCA_CAP's 4 KiB answer came back through a chain of 8 output mailboxes
    for name, value in model.CAPS.items():
        assert getattr(dev.max_caps, name) == value, name
    assert hw.faults == []


def test_illegal_state_transition_names_command_status_and_syndrome(hw: Mlx5Model, dev: Mlx5Device) -> None:
    pd = dev.alloc_pd()
    cq = dev.create_cq(4)
    qp = dev.create_qp(pd, cq, cq, 4, 4)
    assert qp.state() == "RST"
    with pytest.raises(CommandError) as e:
        qp.transition("RTR2RTS_QP")  # RST -> RTS skips INIT and RTR
    assert e.value.command == "RTR2RTS_QP" and e.value.status == 0x10
    assert e.value.syndrome == model.SYNDROMES["bad qp state transition"]
    assert "RTR2RTS_QP failed: status BAD_QP_STATE (0x10), syndrome 0xb0a0011" in str(e.value)
    assert qp.state() == "RST"


def test_bad_command_signature_is_a_delivery_error(dev: Mlx5Device) -> None:
    dev.cmdq.corrupt_next_signature = True
    with pytest.raises(CommandDeliveryError, match=r"ALLOC_PD was not delivered: SIGNATURE_ERR \(0x1\)"):
        dev.alloc_pd()
    assert dev.alloc_pd() > 0  # the queue still works


def test_bad_mailbox_signature_is_a_delivery_error(dev: Mlx5Device, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CommandQueue, "_sign", staticmethod(lambda block: None))  # blocks go out unsigned
    with pytest.raises(CommandDeliveryError, match="CREATE_CQ was not delivered: SIGNATURE_ERR"):
        dev.create_cq(4)


def test_init_hca_before_pages_is_refused(hw: Mlx5Model) -> None:
    q = CommandQueue(hw)
    q.publish_address()
    q.execute("ENABLE_HCA", bytes(prm.EnableHcaIn(opcode=prm.OPCODES["ENABLE_HCA"])), 16)
    with pytest.raises(CommandError) as e:
        q.execute("INIT_HCA", bytes(prm.InitHcaIn(opcode=prm.OPCODES["INIT_HCA"])), 16)
    assert (e.value.status, e.value.syndrome) == (0x4, model.SYNDROMES["pages missing"])
    assert "BAD_SYS_STATE" in str(e.value)


def test_long_input_mailbox_chain(hw: Mlx5Model, dev: Mlx5Device) -> None:
    """MANAGE_PAGES with 300 page addresses: 2,416 input bytes = 16 inline + 5 mailboxes."""
    before = hw._pages_given
    buf = dev.alloc(300 * 4096)
    cmd = prm.ManagePagesIn(op_mod=prm.MANAGE_PAGES_GIVE, input_num_entries=300)
    pas = b"".join((buf.addr + 4096 * i).to_bytes(8, "big") for i in range(300))
    dev.run(cmd, prm.CmdOut, "MANAGE_PAGES", extra=pas)
    assert hw._pages_given == before + 300
    bad = pas[:-8] + (1 << 62).to_bytes(8, "big")  # the last page is not memory we gave the device
    with pytest.raises(CommandError) as e:
        dev.run(cmd, prm.CmdOut, "MANAGE_PAGES", extra=bad)
    assert (e.value.status, e.value.syndrome) == (0x3, model.SYNDROMES["bad page address"])


def loopback(dev: Mlx5Device, log_q: int = 4) -> tuple:
    pd = dev.alloc_pd()
    mr = dev.reg_mr(pd, dev.alloc(1 << 16))
    cq = dev.create_cq(log_q + 1)
    qp = dev.create_qp(pd, cq, cq, log_q, log_q)
    qp.connect(qp.info())
    return pd, mr, cq, qp


def test_loopback_send_and_rdma_write(hw: Mlx5Model, dev: Mlx5Device) -> None:
    _, mr, cq, qp = loopback(dev)
    assert qp.state() == "RTS"
    src = np.frombuffer(mr.buf.view, np.uint8)
    src[:1000] = np.arange(1000) % 251
    qp.post_recv(mr, 8192, 4096)
    qp.post_send("SEND", mr, 0, 1000)
    done = cq.wait(2, timeout=10)
    assert sorted((c.opcode, c.byte_count) for c in done) == [(prm.CQE_REQ, 0), (prm.CQE_RESP_SEND, 1000)]
    assert np.array_equal(src[8192:9192], src[:1000])
    qp.post_send("RDMA_WRITE", mr, 0, 777, remote_addr=mr.addr + 20000, rkey=mr.rkey)
    (c,) = cq.wait(1, timeout=10)
    assert (c.opcode, c.wqe_counter, c.qpn) == (prm.CQE_REQ, 1, qp.qpn)
    assert np.array_equal(src[20000:20777], src[:777])
    assert hw.faults == []


def test_bad_lkey_gives_an_error_completion(dev: Mlx5Device) -> None:
    _, mr, cq, qp = loopback(dev)
    forged = MemoryRegion(mr.buf, mr.lkey ^ 0x1, mr.rkey)  # right index, wrong key byte
    qp.post_send("SEND", forged, 0, 16)
    with pytest.raises(CompletionError, match=r"send work request 0 on QP .* LOCAL_PROT_ERR \(0x4\)") as e:
        cq.wait(1, timeout=10)
    assert e.value.syndrome == 0x4 and e.value.wqe_counter == 0
    assert qp.state() == "ERR"
    qp.post_send("SEND", mr, 0, 16)  # the QP is in error: later WQEs are flushed
    with pytest.raises(CompletionError, match="WR_FLUSH_ERR"):
        cq.wait(1, timeout=10)


def test_out_of_range_and_bad_rkey(dev: Mlx5Device) -> None:
    _, mr, cq, qp = loopback(dev)
    qp.post_send("RDMA_WRITE", mr, 0, 64, remote_addr=mr.addr + mr.length - 32, rkey=mr.rkey)  # runs off the key
    with pytest.raises(CompletionError, match="REMOTE_ACCESS_ERR") as e:
        cq.wait(1, timeout=10)
    assert e.value.syndrome == 0x13


def test_receive_queue_full(dev: Mlx5Device) -> None:
    _, mr, cq, qp = loopback(dev, log_q=3)
    for i in range(8):
        qp.post_recv(mr, 64 * i, 64)
    with pytest.raises(QueueFull, match=r"receive queue of QP .* is full \(8 receives posted\)"):
        qp.post_recv(mr, 0, 64)
    qp.post_send("SEND", mr, 0, 8)  # one message consumes one receive: a slot frees up
    cq.wait(2, timeout=10)
    assert qp.recv_slots == 1
    qp.post_recv(mr, 0, 64)


def test_send_queue_full(dev: Mlx5Device) -> None:
    _, mr, cq, qp = loopback(dev, log_q=2)
    for _ in range(4):
        qp.post_send("RDMA_WRITE", mr, 0, 8, remote_addr=mr.addr + 4096, rkey=mr.rkey, ring=False)
    with pytest.raises(QueueFull, match="send queue of QP .* is full"):
        qp.post_send("RDMA_WRITE", mr, 0, 8, remote_addr=mr.addr + 4096, rkey=mr.rkey)
    qp.ring()
    assert [c.wqe_counter for c in cq.wait(4, timeout=10)] == [0, 1, 2, 3]
    assert qp.send_slots == 4


def test_wrong_command_interface_revision_is_refused(hw: Mlx5Model) -> None:
    model.put(hw.bar, (model.CMDIF_REV_FW_SUB, 16, 16), 4)
    with pytest.raises(HardwareError, match="command interface revision 4, this driver speaks 5"):
        Mlx5Device(hw)


def test_firmware_that_never_finishes_initializing(hw: Mlx5Model, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = hw.bar_write32

    def stuck(offset: int, value: int) -> None:  # the device never clears the initializing bit
        real_write(offset, value)
        model.put(hw.bar, (model.INITIALIZING, 0, 32), 1 << 31)
    monkeypatch.setattr(hw, "bar_write32", stuck)
    monkeypatch.setattr(Mlx5Device, "INIT_TIMEOUT", 0.2)
    with pytest.raises(HardwareError, match="firmware still initializing after 0.2 s"):
        Mlx5Device(hw)


def test_process_memory_mapped_for_the_device_then_its_key_destroyed(hw: Mlx5Model, dev: Mlx5Device) -> None:
    """map_dma + reg_mr over numpy arrays (no DMA buffer in between): a SEND reads the source array when its
    doorbell rings and lands in the destination array; DESTROY_MKEY makes the key refused (LOCAL_PROT_ERR)."""
    pd, _, cq, qp = loopback(dev)
    src = (np.arange(100_003) % 253).astype(np.uint8)
    dst = np.zeros(100_003, np.uint8)
    smr = dev.reg_mr(pd, hw.map_dma(memoryview(src)))
    dmr = dev.reg_mr(pd, hw.map_dma(memoryview(dst)))
    for value in (None, 7):
        if value is not None:
            src[:] = value  # new contents, same registration
        qp.post_recv(dmr, 0, dst.nbytes)
        qp.post_send("SEND", smr, 0, src.nbytes)
        done = cq.wait(2, timeout=10)
        assert sorted(c.byte_count for c in done) == [0, src.nbytes]
        np.testing.assert_array_equal(dst, src)
    qp.post_send("RDMA_WRITE", smr, 10, 1000, remote_addr=dmr.addr + 50_000, rkey=dmr.rkey)
    src[10:1010] = 9  # (after the doorbell: the WRITE already read its payload)
    cq.wait(1, timeout=10)
    np.testing.assert_array_equal(dst[50_000:51_000], np.full(1000, 7, np.uint8))
    dev.dereg_mr(smr)
    hw.unmap_dma(smr.buf)
    with pytest.raises(CommandError, match="DESTROY_MKEY"):
        dev.dereg_mr(smr)  # (already destroyed)
    qp.post_send("SEND", smr, 0, 16)
    with pytest.raises(CompletionError, match="LOCAL_PROT_ERR"):
        cq.wait(1, timeout=10)
    assert hw.faults == []


def test_a_fabric_path_too_long_for_a_socket_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too long for a unix socket path"):
        Mlx5Model(tmp_path / ("f" * 120))
