"""The tgcore plugin ``mlx_rdma``: registers the ``mpi`` and ``mlx5`` transports.

Cheap to import: mpi4py (which loads the MPI library) and the mlx5 driver are imported only when a
transport connects. ``mlx5`` is always listed: on a machine without a ConnectX NIC, connecting to the
hardware raises the driver's "no PCIe" / "no ConnectX device" error, and ``model=True`` runs it on the
software device model.
"""
from __future__ import annotations

import functools
import importlib.util
from typing import Any

import tgcore

TG_HOOKSPEC_VERSION = 1

INSTALL_MPI = "apt-get install openmpi-bin libopenmpi-dev, then pip install mpi4py"


@functools.cache
def mpi_unavailable() -> str | None:
    """Why the ``mpi`` transport cannot work here, or None. Looks for files; loads nothing."""
    try:
        if importlib.util.find_spec("mpi4py") is None:
            return f"mpi4py is not installed ({INSTALL_MPI})"
    except (ImportError, ValueError) as e:
        return f"mpi4py cannot be found: {e}"
    import ctypes.util
    if ctypes.util.find_library("mpi") is None:
        return f"no MPI library (libmpi) on this machine ({INSTALL_MPI})"
    return None


def connect_mpi(**options: Any) -> Any:
    from tg_mlx_rdma.mpi import connect
    return connect(**options)


def connect_mlx5(**options: Any) -> Any:
    from tg_mlx_rdma.mlx5_transport import connect
    return connect(**options)


@tgcore.hookimpl
def tg_register_transports(register: Any) -> None:
    register("mpi", connect_mpi, "MPI (mpi4py) across the processes of an mpirun job; a world of 1 without mpirun",
             probe=mpi_unavailable)
    register("mlx5", connect_mlx5, "the user-space ConnectX (mlx5) driver: RC queue pairs, SEND/RECV; model=True runs "
             "it on the software device model")
