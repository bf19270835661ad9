"""Two processes, each a driver on its own device model, connected over the model's fabric.

``run_pair(scenario, tmp)`` starts processes "a" and "b" (spawned, so each has its own model and
threads); they exchange QP info and buffer keys over a pipe, connect RC QPs and run ``scenario``'s
two halves. Each half checks what it received against numpy patterns both sides can compute, and
returns a dict of results; an exception in either half fails the pair with its traceback.
"""
from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BIG = 64 << 20
SIZES = [1, 4099, 1 << 20, BIG]
MANY = 10_000


def pattern(n: int, seed: int) -> np.ndarray:
    """``n`` bytes both sides can compute: a seeded 64 KiB random block, repeated."""
    block = np.random.default_rng(seed).integers(0, 256, 1 << 16, dtype=np.uint8)
    return np.resize(block, n)


@dataclass
class Side:
    role: str
    conn: Any  # the pipe to the other process
    dev: Any
    qp: Any
    cq: Any  # send and receive completions of the QP
    data: Any  # a BIG + 4 KiB registered buffer
    small: Any  # a 64 KiB registered buffer (notifications, small messages)
    remote: dict  # the peer's buffer addresses and keys

    def u8(self, mr: Any) -> np.ndarray:
        return np.frombuffer(mr.buf.view, np.uint8)


def setup(role: str, fabric: str, conn: Any, log_q: int) -> Side:
    from tg_mlx_rdma.mlx5.device import Mlx5Device
    from tg_mlx_rdma.testing.mlx5_model import Mlx5Model
    dev = Mlx5Device(Mlx5Model(fabric, name=role))
    pd = dev.alloc_pd()
    data = dev.reg_mr(pd, dev.alloc(BIG + 4096))
    small = dev.reg_mr(pd, dev.alloc(1 << 16))
    cq = dev.create_cq(log_q + 2)
    qp = dev.create_qp(pd, cq, cq, log_q, log_q)
    conn.send((qp.info(), {"data": (data.addr, data.rkey), "small": (small.addr, small.rkey)}))
    info, remote = conn.recv()
    qp.connect(info)
    return Side(role, conn, dev, qp, cq, data, small, remote)


def wait_one(s: Side, opcode: int) -> Any:
    (c,) = s.cq.wait(1, timeout=120)
    assert c.opcode == opcode, c
    return c


# ------------------------------------------------------------------------------------------ scenarios

def sizes_a(s: Side) -> dict:
    from tg_mlx_rdma.mlx5 import prm
    src = s.u8(s.data)
    for n in SIZES:
        src[:n] = pattern(n, n)
        assert s.conn.recv() == ("ready", n)  # b posted its receive
        s.qp.post_send("SEND", s.data, 0, n)
        wait_one(s, prm.CQE_REQ)
        assert s.conn.recv() == ("got send", n)
        src[:n] = pattern(n, n + 1)
        addr, rkey = s.remote["data"]
        s.qp.post_send("RDMA_WRITE", s.data, 0, n, remote_addr=addr, rkey=rkey)
        wait_one(s, prm.CQE_REQ)
        s.qp.post_send("SEND", s.small, 0, 1)  # "written": ordered after the write on the RC QP
        wait_one(s, prm.CQE_REQ)
        assert s.conn.recv() == ("got write", n)
    return {}


def sizes_b(s: Side) -> dict:
    from tg_mlx_rdma.mlx5 import prm
    dst = s.u8(s.data)
    for n in SIZES:
        dst[:n + 1] = 0
        s.qp.post_recv(s.data, 0, BIG)
        s.conn.send(("ready", n))
        c = wait_one(s, prm.CQE_RESP_SEND)
        assert c.byte_count == n, (c, n)
        assert np.array_equal(dst[:n], pattern(n, n)), f"SEND of {n} bytes arrived wrong"
        assert dst[n] == 0, "SEND wrote past its length"
        s.qp.post_recv(s.small, 0, 64)
        s.conn.send(("got send", n))
        wait_one(s, prm.CQE_RESP_SEND)
        assert np.array_equal(dst[:n], pattern(n, n + 1)), f"RDMA_WRITE of {n} bytes arrived wrong"
        s.conn.send(("got write", n))
    return {}


def many_a(s: Side) -> dict:
    """MANY 8-byte SENDs through a 64-deep send queue (the ring wraps ~156 times), signalled, rung per 8."""
    from tg_mlx_rdma.mlx5 import prm
    src = s.u8(s.small).view(np.int64)
    depth = s.qp.sq_size
    assert s.conn.recv() == "ready"
    start = time.perf_counter()
    counters = []
    for i in range(MANY):
        if s.qp.send_slots == 0:
            counters += [c.wqe_counter for c in s.cq.wait(1, timeout=120) if c.opcode == prm.CQE_REQ]
        src[i % depth] = i
        s.qp.post_send("SEND", s.small, 8 * (i % depth), 8, ring=(i % 8 == 7 or i == MANY - 1))
    while len(counters) < MANY:
        counters += [c.wqe_counter for c in s.cq.wait(1, timeout=120)]
    elapsed = time.perf_counter() - start
    assert counters == [i & 0xFFFF for i in range(MANY)], "send CQEs out of order or missing"
    assert s.conn.recv() == "done"
    return {"wqes_per_s": MANY / elapsed, "faults": s.dev.hw.faults}


def many_b(s: Side) -> dict:
    from tg_mlx_rdma.mlx5 import prm
    dst = s.u8(s.small).view(np.int64)
    depth = s.qp.rq_size
    from tg_mlx_rdma.mlx5.device import QueueFull
    for i in range(depth):
        s.qp.post_recv(s.small, 8 * i, 8)
    try:
        s.qp.post_recv(s.small, 0, 8)
    except QueueFull:
        pass
    else:
        raise AssertionError(f"a receive queue of {depth} took {depth + 1} receives")
    posted = depth
    s.conn.send("ready")
    got = 0
    while got < MANY:
        for c in s.cq.wait(1, timeout=120):
            assert c.opcode == prm.CQE_RESP_SEND and c.byte_count == 8
            assert c.wqe_counter == got & 0xFFFF, (c, got)
            slot = got % depth
            assert dst[slot] == got, f"message {got} carried {dst[slot]}"
            got += 1
            if posted < MANY:  # keep the receive queue full
                s.qp.post_recv(s.small, 8 * slot, 8)
                posted += 1
    s.conn.send("done")
    return {"faults": s.dev.hw.faults}


def errors_a(s: Side) -> dict:
    """Bad rkey, then (new QP state: ERR) commands that must fail with their syndromes."""
    from tg_mlx_rdma.mlx5.cmdq import CommandDeliveryError, CommandError
    from tg_mlx_rdma.mlx5.device import CompletionError
    out: dict = {}
    addr, rkey = s.remote["data"]
    s.qp.post_send("RDMA_WRITE", s.data, 0, 64, remote_addr=addr, rkey=rkey ^ 0x80)
    try:
        s.cq.wait(1, timeout=60)
    except CompletionError as e:
        out["bad rkey"] = (e.syndrome, str(e))
    try:
        s.qp.transition("INIT2RTR_QP", s.qp.info())  # the QP is in ERR
    except CommandError as e:
        out["illegal transition"] = (e.status, e.syndrome, str(e))
    s.dev.cmdq.corrupt_next_signature = True
    try:
        s.dev.alloc_pd()
    except CommandDeliveryError as e:
        out["bad signature"] = (e.status, str(e))
    s.conn.send("next")
    assert s.conn.recv() == "posted"
    qp2 = s.dev.create_qp(s.qp.pd, s.cq, s.cq, 4, 4)  # a fresh QP for the receive-side error
    s.conn.send(qp2.info())
    qp2.connect(s.conn.recv())
    assert s.conn.recv() == "posted bad recv"
    qp2.post_send("SEND", s.data, 0, 32)
    try:
        s.cq.wait(1, timeout=60)
    except CompletionError as e:
        out["peer bad lkey"] = (e.syndrome, str(e))
    s.conn.send("sent")
    return out


def errors_b(s: Side) -> dict:
    from tg_mlx_rdma.mlx5.device import CompletionError, MemoryRegion
    assert s.conn.recv() == "next"
    s.conn.send("posted")
    qp2 = s.dev.create_qp(s.qp.pd, s.cq, s.cq, 4, 4)
    info = s.conn.recv()
    s.conn.send(qp2.info())
    qp2.connect(info)
    qp2.post_recv(MemoryRegion(s.data.buf, s.data.lkey + 0x100, s.data.rkey), 0, 4096)  # no such key
    s.conn.send("posted bad recv")
    out: dict = {}
    try:
        s.cq.wait(1, timeout=60)
    except CompletionError as e:
        out["bad recv lkey"] = (e.syndrome, str(e))
    assert s.conn.recv() == "sent"
    return out


SCENARIOS = {"sizes": (sizes_a, sizes_b, 6), "many": (many_a, many_b, 6), "errors": (errors_a, errors_b, 4)}


def side(role: str, scenario: str, fabric: str, conn: Any, results: Any) -> None:
    try:
        fa, fb, log_q = SCENARIOS[scenario]
        s = setup(role, fabric, conn, log_q)
        results.put((role, "ok", (fa if role == "a" else fb)(s)))
        s.dev.hw.close()
    except BaseException:
        results.put((role, "error", traceback.format_exc()))


def run_pair(scenario: str, tmp: Path, timeout: float = 240) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    a_end, b_end = ctx.Pipe()
    results = ctx.Queue()
    procs = [ctx.Process(target=side, args=(role, scenario, str(tmp), end, results), daemon=True)
             for role, end in (("a", a_end), ("b", b_end))]
    for p in procs:
        p.start()
    out: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"scenario {scenario}: no answer from {sorted({'a', 'b'} - set(out))} "
                                   f"within {timeout:g} s")
            try:
                role, status, value = results.get(timeout=min(left, 1.0))
            except Exception:  # queue.Empty: check the processes are alive
                dead = [p for p in procs if not p.is_alive() and p.exitcode]
                if dead:
                    raise RuntimeError(f"scenario {scenario}: a process died (exit {dead[0].exitcode})") from None
                continue
            if status == "error":
                raise AssertionError(f"side {role} of {scenario} failed:\n{value}")
            out[role] = value
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return out
