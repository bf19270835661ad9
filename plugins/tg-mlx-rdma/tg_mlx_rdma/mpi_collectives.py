"""The collectives of the ``mpi`` transport (``MPICollectives``, a base of ``mpi.MPITransport``).

In:  the transport's two private communicators (``_comm``: the call checks; ``_coll``: the data stages), its
     receive pool and its waiting loop.
Out: ``barrier``, ``allreduce``/``iallreduce`` (in place with ``out=`` the input) and ``broadcast``; a mismatch of
     shape, dtype, op or root between the ranks raises ``PeerMismatch`` on every rank before any data moves.

Collectives run in two stages: every rank's call is checked against the others' (a small allgather on the private
communicator, posted at once), then the data moves (on a second communicator). MPI matches collectives by the order
they are posted, so the data stages are posted strictly in the order the calls were made (``_collectives``),
whichever handle is waited first.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_mlx_rdma.reduce_ops import reduce_types
from tg_mlx_rdma.transport import (
    REDUCE_OPS,
    CommError,
    Handle,
    PeerMismatch,
    RecvPool,
    Steps,
    Transport,
    _no_commit,
    as_shape,
    broadcast_args,
    describe_header,
    make_header,
    recv_target,
    tensor_bytes,
)

if TYPE_CHECKING:
    from tgcore.dtype import DType
    from tgcore.tensor import Tensor

__all__ = ["CHUNK", "MPICollectives"]

CHUNK = 1 << 30  # bytes per point-to-point message; elements per reduce step


class MPICollectives(Transport):
    """The collectives of ``MPITransport`` (which provides the state and waiting declared here)."""

    if TYPE_CHECKING:
        _mpi: Any
        _comm: Any
        _coll: Any
        _pool: RecvPool
        _collectives: list[Handle]
        _user_ops: dict[tuple[str, str], tuple[Any, Any]]

        def _live(self) -> None: ...
        def _wait(self, reqs: list[Any], what: str, peer: int | None) -> None: ...
        def _requests(self, reqs: list[Any]) -> Callable[[], bool]: ...

    def barrier(self) -> None:
        self._live()
        self._wait([self._comm.Ibarrier()], "barrier", None)

    def iallreduce(self, tensor: Tensor, op: str = "sum", out: Tensor | None = None) -> Handle:
        self._live()
        self._check_op(op)
        data, keep = tensor_bytes(tensor)
        shape, dt = as_shape(keep.shape), keep.dtype
        header = make_header(shape, dt)
        cell: list[Handle] = []
        mpi = self._mpi
        in_place = out is not None and out is keep  # allreduce(g, out=g): MPI's in-place form
        device = tensor.device if out is None else None
        target, mv, commit = recv_target(shape, dt, device, out, self._pool,
                                         None if out is None else (lambda: cell[0]._settle()))

        def steps() -> Steps:
            yield from self._agree(header, REDUCE_OPS.index(op), "allreduce", lambda: cell[0])
            if data.nbytes:
                datatype, mpi_op = self._reduce_types(dt, op)
                step = CHUNK * dt.itemsize
                reqs = [self._coll.Iallreduce(mpi.IN_PLACE if in_place else [data[s:s + step], datatype],
                                              [mv[s:s + step], datatype], mpi_op)
                        for s in range(0, data.nbytes, step)]
                self._collectives.pop(0)
                yield self._requests(reqs)
            else:
                self._collectives.pop(0)
            commit()
            return target
        return self._collective(steps(), f"allreduce ({op}) of {dt.name}{list(shape)}", cell)

    def broadcast(self, tensor: Tensor, root: int = 0, out: Tensor | None = None) -> Tensor:
        self._live()
        shape, dt = broadcast_args(tensor, root, self.world_size)
        header = make_header(shape, dt)
        cell: list[Handle] = []
        kept: list[Tensor] = []
        if self.rank == root:
            mv, keep = tensor_bytes(tensor)
            target, commit = tensor, _no_commit
            kept = [keep]  # (alive until the data is sent)
        else:
            target, mv, commit = recv_target(shape, dt, tensor.device if out is None else None, out)

        def steps() -> Steps:
            yield from self._agree(header, root, "broadcast", lambda: cell[0])
            reqs = [self._coll.Ibcast([mv[s:s + CHUNK], self._mpi.BYTE], root) for s in range(0, mv.nbytes, CHUNK)]
            self._collectives.pop(0)
            yield self._requests(reqs)
            commit()
            kept.clear()
            return target
        result: Tensor = self._collective(steps(), f"broadcast of {describe_header(header)} from rank {root}",
                                          cell).wait()
        return result

    def _collective(self, steps: Steps, what: str, cell: list[Handle]) -> Handle:
        handle = Handle(self, steps, what, None)
        cell.append(handle)
        self._collectives.append(handle)
        try:
            handle._advance()  # posts the check at once, in call order
        except CommError:
            pass  # (wait raises it)
        return handle

    def _agree(self, header: np.ndarray, arg: int, call: str, me: Callable[[], Handle]) -> Steps:
        """Stages checking that every rank passes the same shape, dtype and ``arg`` (the op; the root) to this
        ``call``, then waiting for this call's turn to post its data stage."""
        mine = np.concatenate([header, np.array([arg], dtype=np.int64)])
        everyone = np.zeros((self.world_size, mine.size), dtype=np.int64)
        req = self._comm.Iallgather([mine, self._mpi.INT64_T], [everyone, self._mpi.INT64_T])
        yield self._requests([req])
        if not (everyone == mine).all():
            self._collectives.remove(me())
            label = (lambda a: REDUCE_OPS[int(a)]) if call == "allreduce" else (lambda a: f"root {int(a)}")
            calls = "; ".join(f"rank {r}: {describe_header(row[:-1])} {label(row[-1])}"
                              for r, row in enumerate(everyone))
            raise PeerMismatch(f"rank {self.rank}: {call} needs the same shape, dtype and "
                               f"{'op' if call == 'allreduce' else 'root'} on every rank, got {calls}")
        queue = self._collectives

        yield lambda: _first_in_line(queue, me())  # (an earlier collective posts its data first)

    def _reduce_types(self, dt: DType, op: str) -> tuple[Any, Any]:
        """The MPI datatype and op that reduce ``dt`` with ``op`` (user ops made once, freed at close)."""
        return reduce_types(self._mpi, dt, op, self._user_ops)



def _first_in_line(line: list[Handle], handle: Handle) -> bool:
    """Whether ``handle`` is first in ``line``, moving the ones before it on (they leave the line themselves
    at the right stage; one that failed before that is taken out)."""
    while line[0] is not handle:
        head = line[0]
        if not head.done():
            return False
        if line and line[0] is head:
            line.pop(0)
    return True
