"""The plugin is found, reports why mpi is unavailable, stays cheap to import; tensors go out zero-copy."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from tg_mlx_rdma import plugin
from tg_mlx_rdma.transport import empty_tensor, output_bytes, tensor_bytes

from tgcore import Tensor
from tgcore.dtype import dtypes


def test_tg_plugins_lists_it_ok() -> None:
    out = subprocess.run(["tg", "plugins"], capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "TG_STRICT_PLUGINS": "1"}).stdout
    row = next(line for line in out.splitlines() if line.startswith("mlx_rdma "))
    assert "tg-mlx-rdma" in row and "register_transports" in row and " ok" in row, out


def test_registered_as_the_mpi_and_mlx5_transports() -> None:
    from tgcore.plugins.manager import get_host
    transports = get_host().registry.transports
    assert transports["mpi"].plugin == "mlx_rdma" and transports["mlx5"].plugin == "mlx_rdma"


def test_import_does_not_load_the_mlx5_driver() -> None:
    code = ("import sys, tg_mlx_rdma.plugin, tg_mlx_rdma; "
            "assert not [m for m in sys.modules if 'mlx5' in m], [m for m in sys.modules if 'mlx5' in m]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_import_does_not_load_mpi() -> None:
    code = "import sys, tg_mlx_rdma.plugin, tg_mlx_rdma; assert 'mpi4py' not in sys.modules, 'mpi4py imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_probe_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes.util
    import importlib.util
    plugin.mpi_unavailable.cache_clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "mpi4py is not installed" in plugin.mpi_unavailable()
    plugin.mpi_unavailable.cache_clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert "no MPI library" in plugin.mpi_unavailable()
    plugin.mpi_unavailable.cache_clear()


def test_unavailable_transport_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import tgcore
    from tgcore.plugins.manager import get_host
    from tgcore.transports import TransportError
    transports = get_host().registry.transports
    broken = dataclasses.replace(transports["mpi"], probe=lambda: "no MPI library (test)")
    monkeypatch.setitem(transports, "mpi", broken)
    with pytest.raises(TransportError, match="'mpi' is unavailable here: no MPI library"):
        tgcore.transport("mpi")


def test_cpu_tensors_go_out_and_in_without_copies() -> None:
    t = Tensor(np.arange(8, dtype=np.float32))
    mv, keep = tensor_bytes(t)
    assert keep is t and mv.nbytes == 32
    np.frombuffer(mv, dtype=np.float32)[:] = 7  # the memoryview is the tensor's own memory
    assert (t.numpy() == 7).all()
    out, dest, commit = empty_tensor((2, 3), dtypes.int32, None)
    np.frombuffer(dest, dtype=np.int32)[:] = np.arange(6)
    commit()
    assert out.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_views_and_lazy_tensors_are_made_contiguous() -> None:
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    mv, keep = tensor_bytes((Tensor(base).T + 1)[1:3])
    assert np.array_equal(np.frombuffer(mv, dtype=np.int32).reshape(keep.shape), (base.T + 1)[1:3])
    assert tensor_bytes(Tensor(np.zeros((0, 4), np.float32)))[0].nbytes == 0


def test_receiving_into_a_tensor_is_a_write_like_assign() -> None:
    """recv(out=...) lands in out's own memory: out and tensors realized into it see the new values, lazy tensors
    built from out before keep the old ones, and a pending assign into out runs before the bytes land."""
    import tgcore
    out = Tensor(np.zeros(4, np.float32))
    alias = out.reshape(2, 2).realize()  # shares the memory
    version = tgcore.realization.version(out._buffer())
    out.assign(out + 1)  # pending
    before = out * 10  # reads the assigned values (1.0), built before the receive
    dest, commit = output_bytes(out, (4,), dtypes.float32)
    np.frombuffer(dest, dtype=np.float32)[:] = np.arange(4, dtype=np.float32) + 5
    commit()
    assert out.tolist() == [5.0, 6.0, 7.0, 8.0] and alias.tolist() == [[5.0, 6.0], [7.0, 8.0]]
    assert before.tolist() == [10.0] * 4
    assert tgcore.realization.version(out._buffer()) == version + 2  # the assign, then the receive
    with pytest.raises(ValueError, match="out must own a contiguous buffer"):
        output_bytes(out[1:3], (2,), dtypes.float32)
