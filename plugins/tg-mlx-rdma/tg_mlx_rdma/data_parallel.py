"""Data-parallel training over a transport: every rank trains a copy of the model on its share of each batch.

In:  a model (any object whose tensors ``tgcore.nn.get_state_dict`` finds), a connected transport
     (``tgcore.transport("mpi")``, ``"mlx5"``), and per step this rank's gradients (after ``backward()``).
Out: ``DataParallel``: rank 0's state on every rank at the start; ``reduce_gradients()`` replaces each
     parameter's ``.grad`` by the gradient of the whole global batch, identical on every rank, so the same
     optimizer step keeps the copies identical; ``save()`` writes a checkpoint from rank 0 only.
     ``ShardSampler``: this rank's indices of each global batch.

How: the parameters, last first (the order backward produces their gradients), are cut into a few flat
buckets of about ``bucket_bytes``. ``reduce_gradients`` realizes all buckets in one schedule with
``Tensor.realize(on_ready=...)``: as soon as the kernel that finishes a bucket has run, its in-place
``iallreduce`` starts, while the kernels of the earlier layers' gradients still run (each later bucket's start
also moves the earlier ones on: MPI progresses inside our calls). Buckets start in bucket order on every
rank, whatever order they become ready in, because collectives must be called in the same order everywhere.
Inside ``tgcore.jit`` the same calls are replayed between the same kernels.

Weighting: each rank multiplies its bucket by ``count`` (the number of samples its gradient is the mean over,
default 1) and appends ``count`` to the first bucket; after the sum over ranks every gradient is divided by the
summed count. So uneven shards (a global batch not divisible by the rank count) give exactly the gradient of the
mean loss over the global batch, as one process on the whole batch would.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tg_mlx_rdma.transport import Handle, Transport
    from tgcore.dtype import DType
    from tgcore.runtime.buffer import Buffer
    from tgcore.tensor import Tensor

__all__ = ["DataParallel", "ShardSampler", "shard_sizes"]


@dataclass(frozen=True)
class _Bucket:
    dtype: DType
    members: tuple[int, ...]  # indices into DataParallel.params, in bucket order
    sizes: tuple[int, ...]    # numel of each member


class DataParallel:
    """A model trained on ``transport.world_size`` ranks. See the module docstring.

    ``model``: the model; its state (parameters and buffers such as BatchNorm's running statistics) is set to
    rank 0's on every rank here. ``params``: the tensors whose gradients are averaged (default: the float
    tensors of ``get_parameters(model)`` not created with ``requires_grad=False``, as ``tgcore.nn.optim`` picks
    them; give the optimizer the same ones). BatchNorm statistics are not synchronised after the start: each
    rank keeps those of its own shards (torch's default); ``save()`` writes rank 0's.
    """

    def __init__(self, model: Any, transport: Transport, bucket_bytes: int = 1 << 20,
                 params: Sequence[Tensor] | None = None) -> None:
        from tgcore.dtype import dtypes
        from tgcore.nn.state import get_parameters, get_state_dict
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
        self.model, self.transport = model, transport
        chosen = get_parameters(model) if params is None else list(params)
        self.params = [p for p in chosen if p.requires_grad is not False and dtypes.is_float(p.dtype)]
        if not self.params:
            raise ValueError("DataParallel found no float parameters to train in the model")
        for p in self.params:
            if p.requires_grad is None:
                p.requires_grad_(True)
        self.buckets = _make_buckets(self.params, bucket_bytes)
        self.comm_seconds = 0.0  # time spent in reduce_gradients' transport calls (starting, progressing, waiting)
        for t in get_state_dict(model).values():  # rank 0's state everywhere (each tensor written in place)
            t.realize()
            transport.broadcast(t, root=0, out=t)
        self.round = _Round(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    @property
    def rank(self) -> int:
        return self.transport.rank

    @property
    def world_size(self) -> int:
        return self.transport.world_size

    def accumulate(self, *also_realize: Tensor) -> None:
        """Compute this rank's gradients so far (and ``also_realize``, e.g. the loss) without communicating, so
        the next micro-batch's ``backward()`` adds to numbers, not to an ever longer graph."""
        grads = [p.grad for p in self.params if p.grad is not None] + list(also_realize)
        if grads:
            grads[0].realize(*grads[1:])

    def reduce_gradients(self, *also_realize: Tensor, count: int = 1) -> None:
        """Replace every parameter's ``.grad`` by the average over ranks, weighted by ``count``.

        ``count``: how many samples this rank's gradient is the mean over (its local batch: ``len(indices)``
        from ``ShardSampler``); the result is then the mean over all ranks' samples. With the default 1 on every
        rank it is the plain average. A parameter without a gradient counts as zeros. ``also_realize`` (e.g.
        the loss) is computed in the same pass, sharing the forward work. Call it on every rank, once per step,
        before ``optimizer.step()``; inside ``tgcore.jit`` too."""
        from tgcore.tensor import Tensor
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be the number of samples this rank's gradient is the mean over (an int "
                             f">= 1), got {count!r}")
        flats = []
        for k, bucket in enumerate(self.buckets):
            parts = [_grad_of(self.params[i]).contiguous().flatten() for i in bucket.members]
            if k == 0:
                parts.append(Tensor.full((1,), 1, dtype=bucket.dtype, device=self.params[0].device))
            flat = Tensor.cat(*parts) if len(parts) > 1 else parts[0]
            flats.append(flat * count if count != 1 else flat)
        flats[0].realize(*flats[1:], *also_realize, on_ready=self.round.ready)
        total = flats[0][-1]
        for bucket, flat in zip(self.buckets, flats, strict=True):
            offset = 0
            for i, n in zip(bucket.members, bucket.sizes, strict=True):
                p = self.params[i]
                p.grad = (flat[offset:offset + n] / total).reshape(p.shape)
                offset += n

    def save(self, path: str, tensors: dict[str, Tensor] | None = None) -> None:
        """Rank 0 writes the model's state dict (plus ``tensors``) to the safetensors file ``path``; every rank
        returns once it is written (a barrier), so any rank may read it afterwards."""
        from tgcore.nn.state import get_state_dict, safe_save
        if self.rank == 0:
            safe_save({**get_state_dict(self.model), **(tensors or {})}, path)
        self.transport.barrier()


class _Round:
    """The allreduces of one ``reduce_gradients``: started in bucket order as buckets become ready, all waited
    for once the last has started (inside the ``on_ready`` calls, so a JIT replay does the same)."""

    def __init__(self, dp: DataParallel) -> None:
        self.dp = dp
        self.ready_bufs: dict[int, Buffer] = {}
        self.started: list[tuple[Tensor, Handle]] = []

    def ready(self, i: int, buf: Buffer) -> None:
        nb = len(self.dp.buckets)
        if i >= nb:  # (a tensor of also_realize)
            return
        started = time.perf_counter()
        try:
            self._ready(i, buf, nb)
        except BaseException:
            self.ready_bufs.clear()  # (the next round starts afresh; after a CommTimeout the transport is failed)
            self.started = []
            raise
        finally:
            self.dp.comm_seconds += time.perf_counter() - started

    def _ready(self, i: int, buf: Buffer, nb: int) -> None:
        self.ready_bufs[i] = buf
        while len(self.started) in self.ready_bufs:  # the next bucket in order is ready: start it
            self.started.append(self._start(self.ready_bufs.pop(len(self.started))))
        for _, h in self.started[:-1]:
            h.done()  # moves the earlier buckets on
        if len(self.started) == nb:
            self._finish()

    def _start(self, buf: Buffer) -> tuple[Tensor, Handle]:
        import tgcore
        from tgcore.tensor import Tensor
        t = Tensor(tgcore.realization.new_buffer(buf.device, buf.size, buf.dtype, buf), device=buf.device)
        return t, self.dp.transport.iallreduce(t, "sum", out=t)

    def _finish(self) -> None:
        started, self.started = self.started, []
        for _, h in started:
            h.wait()  # (a failure leaves the transport failed: nothing more to clean up)
        for t, _ in started:
            t.realize()  # (drops the finished write's record)


def _grad_of(p: Tensor) -> Tensor:
    return p.grad.cast(p.dtype) if p.grad is not None else p.zeros_like()


def _make_buckets(params: list[Tensor], bucket_bytes: int) -> list[_Bucket]:
    """Parameters last first, cut into buckets of one dtype each, closed once they reach ``bucket_bytes``."""
    buckets: list[_Bucket] = []
    open_: dict[Any, tuple[list[int], list[int]]] = {}
    for i in reversed(range(len(params))):
        p = params[i]
        members, sizes = open_.setdefault(p.dtype, ([], []))
        members.append(i)
        sizes.append(p.numel())
        if sum(sizes) * p.dtype.itemsize >= bucket_bytes:
            buckets.append(_Bucket(p.dtype, tuple(members), tuple(sizes)))
            del open_[p.dtype]
    buckets += [_Bucket(dt, tuple(m), tuple(s)) for dt, (m, s) in open_.items()]
    return buckets


def shard_sizes(batch: int, world_size: int) -> list[int]:
    """How a global batch of ``batch`` samples is split: ``batch // world_size`` each, and one more for the first
    ``batch % world_size`` ranks (e.g. 10 over 4 ranks: 3, 3, 2, 2)."""
    base, extra = divmod(batch, world_size)
    return [base + (r < extra) for r in range(world_size)]


class ShardSampler:
    """This rank's sample indices of each global batch of a dataset of ``n`` samples.

    Every rank draws the same order (a permutation from ``seed`` and the epoch when ``shuffle``, else 0..n-1), cuts
    it into global batches of ``batch_size`` and takes its contiguous part of each: ranks ``r < batch_size %
    world_size`` get one sample more (``shard_sizes``). Pass ``count=len(indices)`` to
    ``DataParallel.reduce_gradients``: the averaged gradient is then that of the mean loss over the whole global
    batch, exactly as one process training on it. The last, shorter global batch is dropped when ``drop_last``
    (the default), else kept when it has at least one sample per rank (a rank with no sample has no mean loss).
    """

    def __init__(self, n: int, batch_size: int, rank: int, world_size: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = True) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not a rank of a group of {world_size}")
        if batch_size < world_size:
            raise ValueError(f"global batch_size {batch_size} is smaller than the {world_size} ranks: every rank "
                             "needs at least one sample per batch")
        if n < 0:
            raise ValueError(f"dataset size must be >= 0, got {n}")
        self.n, self.batch_size, self.rank, self.world_size = n, batch_size, rank, world_size
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently for ``epoch`` (the same on every rank)."""
        self.epoch = epoch

    def _global_batches(self) -> list[tuple[int, int]]:
        full, rest = divmod(self.n, self.batch_size)
        spans = [(b * self.batch_size, self.batch_size) for b in range(full)]
        if rest and not self.drop_last and rest >= self.world_size:
            spans.append((full * self.batch_size, rest))
        return spans

    def __len__(self) -> int:
        return len(self._global_batches())

    def __iter__(self) -> Iterator[np.ndarray]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n) if self.shuffle \
            else np.arange(self.n)
        for start, size in self._global_batches():
            sizes = shard_sizes(size, self.world_size)
            mine = start + sum(sizes[:self.rank])
            yield order[mine:mine + sizes[self.rank]]
