"""tg-mlx-rdma: move tensors between processes and machines.

``tgcore.transport("mpi")`` connects through MPI (see ``tg_mlx_rdma.mpi``), ``tgcore.transport("mlx5")``
through the user-space ConnectX driver (``tg_mlx_rdma.mlx5_transport`` over ``tg_mlx_rdma.mlx5``; with
``model=True`` on the software device model ``tg_mlx_rdma.testing.mlx5_model``). The API every transport
implements and its exceptions are in ``tg_mlx_rdma.transport``; data-parallel training on any of them (a model
wrapper averaging gradients in overlapped bucket allreduces, a rank-sharding sampler) in
``tg_mlx_rdma.data_parallel``. ``tg_mlx_rdma.endian`` and
``tg_mlx_rdma.record`` are the big-endian and C-struct helpers the mlx5 driver builds on.

Importing this package is cheap: nothing here loads MPI or the driver.
"""
from tg_mlx_rdma.endian import be_bytes, from_be16, from_be32, from_be64, to_be16, to_be32, to_be64
from tg_mlx_rdma.record import Field, FieldArray, Record
from tg_mlx_rdma.transport import (
    CommError,
    CommTimeout,
    PeerFailed,
    PeerMismatch,
    Transport,
    TransportClosed,
)

__all__ = ["CommError", "CommTimeout", "Field", "FieldArray", "PeerFailed", "PeerMismatch", "Record", "Transport",
           "TransportClosed", "be_bytes", "from_be16", "from_be32", "from_be64", "to_be16", "to_be32", "to_be64"]
