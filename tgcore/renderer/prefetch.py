"""Software prefetch for reductions that stream a big input (a quantized weight in a matrix-vector product).

In:  a kernel's linear UOp list. Out: ``Prefetcher(kernel).distance(load, loops)``: how many elements ahead of a
     load's index to prefetch (None: no prefetch), ``to_l2``: the loads whose prefetch should stop at L2;
     ``loop_nest``: the innermost loops and the loops open at each load. Renderers emit the prefetches (C:
     ``__builtin_prefetch``; machine code: ``prefetcht0``).
"""
from __future__ import annotations

from tgcore.runtime.cpufeatures import CACHE_LINE
from tgcore.uop import Ops, RangeKind, UOp

# Software prefetch (see Prefetcher): a reduction kernel streaming an input at least this big, when the next
# outer iteration's data is at most PREFETCH_MAX_AHEAD bytes away (further, it would arrive long before its use)
PREFETCH_MIN_BYTES = 1 << 16
PREFETCH_MAX_AHEAD = 1 << 16
# ... else this many bytes ahead along the loop that streams it (attention's kernels at 8 rows, 30 layers, one thread:
# 1/2/4/8 KiB ahead, weights x values 3.2-3.3/3.2-3.4/3.5-3.6/3.7-3.8 ms, keys 2.4-2.5/2.5/2.4/2.7 ms)
STREAM_AHEAD = 2048


def loop_nest(kernel: list[UOp]) -> tuple[set[UOp], dict[UOp, tuple[UOp, ...]]]:
    """The RANGEs of a linear kernel with no loop inside them, and the loops open at each LOAD (outermost first)."""
    inner: set[UOp] = set()
    open_at: dict[UOp, tuple[UOp, ...]] = {}
    open_: tuple[UOp, ...] = ()
    for u in kernel:
        if u.op is Ops.RANGE:
            if open_:
                inner.discard(open_[-1])
            open_ += (u,)
            inner.add(u)
        elif u.op is Ops.END:
            open_ = tuple(r for r in open_ if r not in u.src[1:])
        elif u.op is Ops.LOAD:
            open_at[u] = open_
    return inner, open_at


def _nbytes(param: UOp) -> int:
    return getattr(param.dtype, "size", 0) * param.dtype.itemsize  # type: ignore[attr-defined]


def _looked_up(load: UOp) -> bool:
    """A load at an index read from memory (a table lookup): not a stream."""
    return len(load.src[0].src) > 1 and any(u.op is Ops.LOAD for u in load.src[0].src[1].toposort)


class Prefetcher:
    """Where a kernel should prefetch: a reduction that streams a big input (a quantized weight in a matrix-vector
    product) reads it once, in several interleaved streams (one per output row computed together), which the
    hardware prefetchers follow badly. Each load of that input in a reduce loop then prefetches what the next
    iteration of the outermost output loop will load at the same point: one address per cache line a loop
    iteration touches (loads in a short unrolled loop are covered by their enclosing loop's).

    When that next iteration's data is too far away (attention at several rows: each row reads its own window of
    the KV cache, a whole sequence's cache further on), a load prefetches ``STREAM_AHEAD`` bytes further along the
    innermost loop that walks the input by whole lines instead (a window's slots, one key or value row each)."""

    def __init__(self, kernel: list[UOp], unrolled_trips: int = 0, vectorized_trips: int = 0,
                 to_l2: bool = False) -> None:
        """``unrolled_trips``: innermost loops this short are unrolled by the output's compiler (their loads are
        covered by the enclosing loop's prefetches); ``vectorized_trips``: innermost loops of scalar loads this short
        are vectorized by it (a prefetch inside would stop that). 0: no such loops (machine code). ``to_l2``: the
        renderer emits the prefetches of ``to_l2`` as L2-only (then a load whose next outer iteration is too far may
        prefetch a nearer output loop's next iteration: ``_nearer_output``)."""
        loaded = [u.src[0].src[0] for u in kernel if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX
                  and u.src[0].src[0].op is Ops.PARAM and not _looked_up(u)]
        big = max(loaded, key=_nbytes, default=None)
        self.buf = big if big is not None and _nbytes(big) >= PREFETCH_MIN_BYTES else None
        self.unrolled_trips, self.vectorized_trips, self.l2_hints = unrolled_trips, vectorized_trips, to_l2
        self.done: dict[UOp, list[UOp]] = {}  # innermost loop -> indices prefetched in its body
        # loads that prefetch along a window from inside a loop over one row's vectors -> that loop and every how many
        # of its trips (one per cache line: its other trips read the same lines); a renderer that has no such
        # condition prefetches on every trip
        self.once_per_line: dict[UOp, tuple[UOp, int]] = {}
        # loads prefetching the next output iteration's data (a weight streamed once): into L2 only, not L1 (taken
        # into L1, presumably each prefetch holds one of the core's few L1 miss buffers until its line arrives, which
        # the demand loads then wait for; a product of several activation rows, more work per line, lost most).
        # SmolLM2's kernels, one thread, weights from memory in 2 MiB pages, kernel CPU time, interleaved, at 1/4/8
        # rows: Q8_0 49152x576 (output projection) 2.75/3.35/3.63 -> 2.67/2.94/3.11 ms, Q4_1 576x1536 49.6/66.2/73.7
        # -> 46.9/59.9/70.2 us, Q5_0 1536x576 61.7/65.5/74.4 -> 57.6/65.6/73.7 us
        self.to_l2: set[UOp] = set()

    def distance(self, load: UOp, loops: tuple[UOp, ...]) -> int | None:
        """Elements ahead of ``load``'s index to prefetch, or None for no prefetch (``loops``: the open ones)."""
        from tgcore.uop.symbolic import difference, stride
        index = load.src[0]
        if self.buf is None or index.src[0] is not self.buf or len(index.src) != 2 or not loops:
            return None
        kinds = [r.arg.kind for r in loops]
        outer = next((r for r, k in zip(loops, kinds, strict=True) if k in (RangeKind.GLOBAL, RangeKind.THREAD)), None)
        inner = loops[-1]
        trips = inner.src[0].arg if inner.src[0].op is Ops.CONST else 0
        if outer is None or RangeKind.REDUCE not in kinds[loops.index(outer):]:
            return None
        if 0 < trips <= self.vectorized_trips and load.dtype.count == 1:
            return None  # a short scalar loop the C compiler vectorizes (a byte dot): a prefetch would stop that
        used = index.src[1].ranges  # (a loop still open here can not be closed inside the index)
        if not all(r in used for r in loops):  # data reused across a loop (a matmul's) is cached
            return None
        ahead, size = stride(index.src[1], outer), load.dtype.itemsize // load.dtype.count
        far = ahead is not None and ahead * size > PREFETCH_MAX_AHEAD
        if far and (nearer := self._nearer_output(index.src[1], loops[loops.index(outer) + 1:], size, trips)):
            ahead, far = nearer, False
        if far:
            ahead = self._along_stream(index.src[1], loops[loops.index(outer) + 1:], size)
        elif 0 < trips <= self.unrolled_trips:
            return None
        if ahead is None or not CACHE_LINE <= ahead * size <= PREFETCH_MAX_AHEAD:
            return None
        seen = self.done.setdefault(inner, [])
        for idx in seen:
            gap = difference(index.src[1], idx)
            if gap is not None and abs(gap) * size < CACHE_LINE:
                return None
        seen.append(index.src[1])
        step = stride(index.src[1], inner)
        if far and step is not None and 0 < step * size < CACHE_LINE:
            self.once_per_line[load] = (inner, CACHE_LINE // (step * size))
        if not far:
            self.to_l2.add(load)
        return ahead

    def _nearer_output(self, index: UOp, inside: tuple[UOp, ...], size: int, trips: int) -> int | None:
        """Where the renderer prefetches into L2 only: the step of the outermost output loop inside the outer one
        whose next iteration is within ``PREFETCH_MAX_AHEAD`` (attention's weights times values at several rows: the
        next KV head's run of value rows, 64 KiB on, while this one's streams: two streams in flight where one was;
        C harness, SmolLM2's 30 layers at 4 rows, one thread, caches flushed by 96 MiB: 1.38-1.44 -> 1.17-1.21 ms),
        None without one, or where the innermost loop is one the compiler unrolls (its prefetch stays along the
        stream, once per line: attention's keys, whose two unrolled rows are two streams already)."""
        from tgcore.uop.symbolic import stride
        if not self.l2_hints or 0 < trips <= self.unrolled_trips:
            return None
        for i, r in enumerate(inside):
            if r.arg.kind is not RangeKind.GLOBAL:
                continue
            step = stride(index, r)
            if step is None or not CACHE_LINE <= step * size <= PREFETCH_MAX_AHEAD:
                continue
            # the elements the loops inside walk from one iteration's start: a next iteration at most that far on
            # continues one stream (a long row's split sum), which the hardware prefetcher follows
            walked = 0
            for q in inside[i + 1:]:
                q_step, q_trips = stride(index, q), q.src[0].arg if q.src[0].op is Ops.CONST else 0
                if q_step is None or q_trips <= 0:
                    return None
                walked += (q_trips - 1) * abs(q_step)
            if step > walked + CACHE_LINE // size:
                return step
        return None

    def _along_stream(self, index: UOp, inside: tuple[UOp, ...], size: int) -> int | None:
        """Elements ``STREAM_AHEAD`` bytes further along the innermost of the loops ``inside`` the outer one that the
        C compiler does not unroll and that moves ``index`` by at least a cache line per step (a window's slots); a
        loop that walks less than ``STREAM_AHEAD`` in steps under a line (a slot row's vectors) is passed over. None
        without one, or where a loop steps under a line over ``STREAM_AHEAD`` or more (a long row, as a float
        matrix-vector product's over 64 KiB: one sequential stream, which the hardware prefetcher follows)."""
        from tgcore.uop.symbolic import stride
        for r in reversed(inside):
            trips = r.src[0].arg if r.src[0].op is Ops.CONST else 0
            step = stride(index, r)
            if step is not None and 0 < step * size < CACHE_LINE:
                if 0 < trips and step * size * trips < STREAM_AHEAD:
                    continue
                return None
            if 0 < trips <= self.unrolled_trips:
                continue
            if step is None or step <= 0:
                return None
            return step * max(1, STREAM_AHEAD // (step * size))
        return None
