"""The driver against the device model in two processes: data really crosses between two devices.

Each test runs both halves of a scenario in ``mlx5_pair`` (spawned processes, a pipe for the
connection details); every byte received is compared with a numpy pattern the sender also computed.
"""
from __future__ import annotations

from pathlib import Path

from mlx5_pair import run_pair
from tg_mlx_rdma.testing import mlx5_model as model


def test_send_recv_and_rdma_write_1_byte_to_64_mib(tmp_path: Path) -> None:
    """SEND and RDMA_WRITE of 1 B, 4099 B, 1 MiB and 64 MiB; the receiver checks every byte (and no more)."""
    run_pair("sizes", tmp_path)


def test_ten_thousand_wqes_wrap_the_rings(tmp_path: Path) -> None:
    """10,000 SENDs through 64-deep queues and a 256-entry CQ: WQE counters and payloads stay in order."""
    out = run_pair("many", tmp_path)
    assert out["a"]["faults"] == [] and out["b"]["faults"] == []
    print(f"mlx5 model: {out['a']['wqes_per_s']:.0f} WQEs/s (verified against the device model, not hardware)")


def test_errors_across_processes(tmp_path: Path) -> None:
    out = run_pair("errors", tmp_path)
    a, b = out["a"], out["b"]
    syndrome, text = a["bad rkey"]
    assert syndrome == 0x13 and "REMOTE_ACCESS_ERR" in text and "send work request 0" in text
    status, syndrome, text = a["illegal transition"]
    assert (status, syndrome) == (0x10, model.SYNDROMES["bad qp state transition"])
    assert "INIT2RTR_QP failed: status BAD_QP_STATE (0x10)" in text
    status, text = a["bad signature"]
    assert status == 0x1 and "ALLOC_PD was not delivered: SIGNATURE_ERR" in text
    syndrome, text = b["bad recv lkey"]  # the receiver's own WQE had a bad key: its CQE says so ...
    assert syndrome == 0x4 and "receive work request 0" in text and "LOCAL_PROT_ERR" in text
    syndrome, text = a["peer bad lkey"]  # ... and the sender learns the peer failed the operation
    assert syndrome == 0x14 and "REMOTE_OP_ERR" in text
