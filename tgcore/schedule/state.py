"""Realization state: which memory holds which value, owned by one object (``REALIZATION``).

In:  BUFFER uops made by the scheduler and the front end, results of realizes, writes into memory
     (``Tensor.assign``, custom kernels, a transport receiving into a tensor).
Out: the runtime ``Buffer`` behind a BUFFER uop, the buffer an earlier realize left a lazy node's
     value in, the writes still to run, and a version per buffer that every write bumps.

How:
- ``buffer(u)`` / ``bind(u, buf)``: BUFFER uop -> runtime Buffer (weak in the uop: a graph nobody
  holds frees its memory).
- The realized cache maps a lazy node to the BUFFER uop holding its value, with the versions of
  the memory the value lives in and was computed from. Every write into memory bumps its
  version (``invalidate``), so exactly the entries that depend on it go stale: a lookup drops
  them (``drops`` counts them); the rest of the cache stays.
- A lazy ``assign`` gives the written tensor a new BUFFER uop over the same memory (a new version
  of its name) and records the write as pending under that uop; it runs when something reads the
  new uop. Graphs built before the assign keep the old uop: if any of them is still alive when the
  write runs, the old contents are first copied to memory of their own (``preserve``), so they keep
  reading the values they were built from.
- Holders: the tensors realized into a buffer (``hold``). They follow a write into it (an assign
  through a view of the buffer, as a KV cache does, moves them all to the new version).
- Writes no assign describes (a JIT replay redoing the writes it captured, ``rename_for_overwrite``): the
  memory's names are looked up (kept per written memory), and a name some lazy graph still reads gets a new
  version for its holders and its old contents copied aside, as an assign does. Whether anything but the
  holders reads a name is told by its readers: every name is watched from birth (``watch_readers``), so the
  nodes built on it or on a view of it, and the tensors that are such a view (``Tensor`` adds them), are known;
  a name whose only live readers are its holders costs no new name.
- Memory handed out again and again over one node (a transport's receive pool): ``sole_buffer`` says when nothing
  but the node reads it; ``lend`` holds the tensor made over it and remembers the node's readers count and an
  event count (names, pending writes, captures of watched memory anywhere), so ``returned`` tells in constant time
  that the tensor is gone and nothing else read the memory since.
"""
from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tgcore.dtype import DType, dtypes
from tgcore.helpers import prod
from tgcore.runtime.buffer import Buffer
from tgcore.uop import Ops, UOp
from tgcore.uop.shape import shape_of
from tgcore.uop.uop import watch_readers

MOVEMENT = (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP, Ops.EXPAND, Ops.PAD)
# (an ``Ops.X`` lookup costs ~150 ns on Python 3.11's enums: the per-message paths below, which a transport runs for
# every tensor it receives, compare with these)
_BUFFER, _RESHAPE = Ops.BUFFER, Ops.RESHAPE


def base_buffer_uop(u: UOp) -> UOp | None:
    """The BUFFER uop under a chain of movement ops, or None when ``u`` computes something."""
    while u.op in MOVEMENT:
        u = u.src[0]
    return u if u.op is _BUFFER else None


def written_buffer_uop(target: UOp) -> UOp | None:
    """The BUFFER uop an assign into ``target`` writes: under its views, and under the table of a ``Tensor.take``
    (an assign into a take writes the table's elements the index names)."""
    while target.op in MOVEMENT or target.op is Ops.INDEX:
        target = target.src[0]
    return target if target.op is Ops.BUFFER else None


_Reads = tuple[tuple["weakref.ref[Buffer]", int], ...]  # buffers a cached value was computed from, with versions


@dataclass
class PendingWrite:
    """A write not yet finished: an assign (store ``value`` into ``target``, a view of the old BUFFER uop, on
    ``device``), or one started outside the scheduler that ``finish()`` waits for (``prepare_write``)."""
    target: UOp | None = None
    value: UOp | None = None
    device: str = ""
    finish: Callable[[], None] | None = None


class RealizationState:
    """The one owner of realization state. Use the module's ``REALIZATION`` instance."""

    def __init__(self) -> None:
        self._buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
        # lazy node -> the BUFFER uop holding its value (weakly: the cache keeps no memory alive), the version of
        # the memory it lives in, and the base Buffers it was computed from (weakly) with their versions then
        self._realized: weakref.WeakKeyDictionary[UOp, tuple[weakref.ref[UOp], int, _Reads]] = \
            weakref.WeakKeyDictionary()
        self.pending: dict[UOp, PendingWrite] = {}  # new BUFFER uop -> the write that makes its value
        self._holders: weakref.WeakKeyDictionary[UOp, dict[int, weakref.ref[Any]]] = weakref.WeakKeyDictionary()
        self._unique = itertools.count()
        self._device_uops: dict[str, UOp] = {}
        self._cache_enabled = [True]
        self.drops = 0      # cached values dropped because memory they depend on was written
        self.preserved = 0  # old contents copied aside for lazy readers of a value an assign replaced
        # the names (BUFFER uops over it or a view of it) of memory a JIT replay writes: kept on its base Buffer, as
        # ``Buffer.names`` (a replay looks them up for every buffer it writes)
        self._write_logs: list[list[Buffer]] = []  # open recordings of the memory written (recording_writes)
        # memory (a base Buffer) a JIT capture's kernels read by Buffer, not by name -> how many live captures do
        self._captured: weakref.WeakKeyDictionary[Buffer, int] = weakref.WeakKeyDictionary()
        # bumped whenever watched memory gets a name, a capture or a pending write, or a name is rebound, anywhere:
        # a lease (``lend``) taken at the same count knows none of these happened to its memory
        self._events = 0

    # ---- buffers ----
    def buffer(self, u: UOp) -> Buffer | None:
        """The runtime Buffer behind a BUFFER uop, or None."""
        return self._buffers.get(u)

    def share_memory(self, a: UOp, b: UOp) -> bool:
        """Whether the BUFFER uops ``a`` and ``b`` are, or view, overlapping bytes of one allocation (a realized
        slice can be a view of its source's memory)."""
        if a is b:
            return True
        ba, bb = self.buffer(a), self.buffer(b)
        if ba is None or bb is None or ba.base is not bb.base:
            return False
        return ba.offset < bb.offset + bb.nbytes and bb.offset < ba.offset + ba.nbytes

    def bind(self, u: UOp, buf: Buffer) -> None:
        """Put ``buf`` behind the BUFFER uop ``u`` (e.g. a view of a file a loader mapped)."""
        if u.op is not Ops.BUFFER:
            raise ValueError(f"bind needs a BUFFER uop, got {u.op.name}")
        self._buffers[u] = buf
        self._events += 1

    def new_buffer(self, device: str, size: int, dtype: DType, buf: Buffer | None = None) -> UOp:
        """A fresh BUFFER uop (distinct from every other) with ``buf`` (default: a new lazily allocated Buffer)."""
        dev = self._device_uops.get(device)
        if dev is None:  # (the same hash-consed node every time: looked up once per device name)
            dev = self._device_uops[device] = UOp(Ops.DEVICE, dtypes.void, (), device)
        u = UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, dtypes.void, (), next(self._unique)), dev), size)
        watch_readers(u)  # (before anything reads it: a replay asks whether anything but its holders does)
        if buf is None:
            buf = Buffer(device, size, dtype)
        else:  # a new name of memory that exists: a replay that writes it must find this name too
            names = buf.base.names
            if names is not None:
                names.append(weakref.ref(u))
                self._events += 1
        self._buffers[u] = buf
        return u

    def new_view(self, base: UOp, size: int, offset_bytes: int) -> UOp:
        """A fresh BUFFER uop for ``size`` elements of ``base``'s buffer starting ``offset_bytes`` in."""
        return self.new_buffer(base.src[1].arg, size, base.dtype,
                               self._buffers[base].view(size, base.dtype, offset_bytes))

    def new_version(self, old: UOp) -> UOp:
        """A new BUFFER uop naming the same memory as ``old`` (the value after a write into it)."""
        return self.new_buffer(old.src[1].arg, old.arg, old.dtype, self._buffers[old])

    def version(self, buf: Buffer) -> int:
        """How many times the memory under ``buf`` was written (through a write this state was told of)."""
        return buf.base.version

    # ---- the realized cache ----
    @contextlib.contextmanager
    def no_cache(self) -> Iterator[None]:
        """Recompute lazy nodes even when an earlier realize computed them (the JIT's capture needs every kernel)."""
        self._cache_enabled.append(False)
        try:
            yield
        finally:
            self._cache_enabled.pop()

    def cache_enabled(self) -> bool:
        return self._cache_enabled[-1]

    def cached(self, node: UOp) -> UOp | None:
        """The BUFFER uop an earlier realize left ``node``'s value in, if still valid (and caching is on). An entry
        whose memory, or memory it was computed from, was written since is dropped (counted in ``drops``)."""
        if not self._cache_enabled[-1]:
            return None
        entry = self._realized.get(node)
        if entry is None:
            return None
        ref, version, reads = entry
        buf_uop = ref()
        buf = self._buffers.get(buf_uop) if buf_uop is not None else None
        if buf is None:  # (its memory is gone: nothing to reuse)
            del self._realized[node]
            return None
        if buf.base.version != version or _stale(reads):
            del self._realized[node]
            self.drops += 1
            return None
        return buf_uop

    def remember(self, node: UOp, buf_uop: UOp, reads: Iterable[Buffer]) -> None:
        """``node``'s value is in ``buf_uop``, computed from the memory of ``reads`` (base Buffers)."""
        self._realized[node] = (weakref.ref(buf_uop), self._buffers[buf_uop].base.version,
                                tuple((weakref.ref(b), b.version) for b in reads))

    def invalidate(self, buf: Buffer) -> None:
        """``buf``'s memory was written: bump its version, so the cached values that depend on it (computed from it
        or living in it) are dropped when next looked up; no other entry is."""
        buf.base.version += 1
        for log in self._write_logs:
            log.append(buf.base)

    @contextlib.contextmanager
    def recording_writes(self) -> Iterator[list[Buffer]]:
        """While active, the base Buffers of the memory every write goes to (a JIT capture: what its replays write)."""
        log: list[Buffer] = []
        self._write_logs.append(log)
        try:
            yield log
        finally:
            self._write_logs.remove(log)

    # ---- tensors (the API for plugins: tensors are duck-typed, this module does not import Tensor) ----
    def buffer_of(self, tensor: Any) -> Buffer | None:
        """The Buffer holding ``tensor``'s elements, realizing it (and running writes into it) first; None when
        the tensor is a view that is not a whole buffer of its own (``.contiguous()`` it)."""
        u = tensor.uop
        name = u.src[0] if u.op is _RESHAPE else u
        if name.op is not _BUFFER or name not in self._buffers or name in self.pending:
            tensor.realize()
        return self.own_buffer(tensor)

    def own_buffer(self, tensor: Any) -> Buffer | None:
        """The Buffer ``tensor`` owns whole and contiguous (its node is a BUFFER uop or a reshape of one), or None
        (a view, a lazy expression). Realizes and changes nothing: what ``prepare_write`` accepts."""
        u = tensor.uop
        old = u.src[0] if u.op is _RESHAPE else u
        buf = self._buffers.get(old) if old.op is _BUFFER else None
        if buf is None or buf.size != _numel(u) or buf.dtype != u.dtype:
            return None
        return buf

    def in_place_buffer(self, tensor: Any) -> Buffer | None:
        """The Buffer a write into ``tensor`` can go straight into (``tensor`` owns it, no write into it is pending and
        nothing but the tensors realized into it reads it), or None. Changes nothing: a writer that finds it can
        still decide not to write; once it does, it ``invalidate``s the buffer, all ``prepare_write`` would do."""
        buf = self.own_buffer(tensor)
        if buf is None:
            return None
        u = tensor.uop
        name = u.src[0] if u.op is _RESHAPE else u
        if name in self.pending or not self._only_holders_read(name):
            return None
        return buf

    def prepare_write(self, tensor: Any, finish: Callable[[], None] | None = None) -> Buffer:
        """Get ``tensor``'s own buffer ready to be written outside the scheduler (a transport receiving into it).

        Like ``Tensor.assign``: the tensor and every tensor realized into that memory move to a new version of it,
        lazy tensors built before keep the old values (copied aside if any is alive), cached values that depend on
        the memory are dropped and its version is bumped. When nothing but those tensors reads the memory's name
        (the common case: a buffer received into again and again) they keep their node and see the write in place;
        only the version is bumped. ``finish``: for a write that is still under way when
        this returns (a non-blocking receive), what waits for it; any realize that reads the tensor calls it
        first. Raises ValueError when the tensor does not own a contiguous buffer."""
        buf = self.own_buffer(tensor)
        if buf is None:
            raise ValueError("the tensor written into must own a contiguous buffer (Tensor.empty(...) or a "
                             "realized tensor), not a view or a lazy expression")
        u = tensor.uop
        old = u.src[0] if u.op is _RESHAPE else u
        if old in self.pending:  # (an earlier write into it finishes first)
            tensor.realize()
            old = tensor.uop.src[0] if tensor.uop.op is _RESHAPE else tensor.uop
        if finish is None and self._only_holders_read(old):  # (they see the write in place: no new name needed)
            self.invalidate(buf)
            return buf
        new = self.new_version(old)
        self.move_holders(old, new, also=tensor)
        self.invalidate(buf)
        old_ref = weakref.ref(old)
        del old, u
        still_read = old_ref()
        if still_read is not None:
            self.preserve(still_read)
        del still_read
        if finish is not None:
            self.pending[new] = PendingWrite(finish=finish)
            self._events += 1
        return buf

    # ---- holders ----
    def hold(self, tensor: Any) -> None:
        """``tensor`` is realized into its BUFFER (its uop is movement ops over one): it follows writes into it."""
        base = base_buffer_uop(tensor.uop)
        if base is None:
            return
        held = self._holders.get(base)
        if held is None:
            held = self._holders[base] = {}
        else:
            known = held.get(id(tensor))
            if known is not None and known() is tensor:
                return
            if len(held) >= 16:  # (a buffer a cached value keeps alive gets a new holder per realize that hits it)
                for key in [k for k, r in held.items() if r() is None]:
                    del held[key]
        held[id(tensor)] = weakref.ref(tensor)

    def move_holders(self, old: UOp, new: UOp, also: Any = None) -> None:
        """Point every holder of ``old`` (and ``also``) at ``new`` instead: they see the write that makes it."""
        held = self._holders.pop(old, {})
        self._events += 1  # (a lease's holders' table is gone)
        moved = [t for r in held.values() if (t := r()) is not None and base_buffer_uop(t.uop) is old]
        if also is not None and all(t is not also for t in moved):
            moved.append(also)
        for t in moved:
            u = t.uop
            if u.op is _RESHAPE and u.src[0] is old:  # (the common case, without a graph walk)
                t.uop = u.replace(src=(new,))  # (keeps its tag: a leaf's marks it for backward)
            else:
                t.uop = u.substitute({old: new})
            self.hold(t)

    # ---- pending writes ----
    def defer_write(self, new: UOp, write: PendingWrite) -> None:
        self.pending[new] = write
        self._events += 1

    def pending_reads(self, outs: Iterable[UOp]) -> list[UOp]:
        """The BUFFER uops with a pending write that the graphs of ``outs`` read, in the order to run them."""
        if not self.pending:
            return []
        found: list[UOp] = []
        for o in outs:
            found.extend(n for n in o.toposort if n.op is Ops.BUFFER and n in self.pending)
        return list(dict.fromkeys(found))

    def preserve(self, old: UOp, copy: Callable[[Buffer, Buffer], None] | None = None) -> bool:
        """Before memory is written: put a copy of the contents the BUFFER uop ``old`` names behind it (made with
        ``copy(dest, src)``, by default a plain copy), so its readers keep the old values. Returns whether it
        copied (nothing to copy when the memory was never allocated)."""
        buf = self._buffers.get(old)
        if buf is None or not buf.is_allocated():
            return False
        dest = Buffer(buf.device, buf.size, buf.dtype)
        if copy is None:
            dest.ensure_allocated().copy_from(buf)
        else:
            copy(dest, buf)
        self._buffers[old] = dest
        self._events += 1
        names = buf.base.names
        if names is not None:  # (it names the copy now)
            names[:] = [r for r in names if r() is not old]
        self.preserved += 1
        return True

    # ---- writes kernels make that no assign describes (a JIT replay) ----
    def rename_for_overwrite(self, bufs: Iterable[Buffer]) -> list[tuple[weakref.ref[UOp], UOp]]:
        """The memory of ``bufs`` is about to be written by kernels that no assign describes (a JIT replay redoing the
        writes it captured): every name (BUFFER uop) of the memory gets a new version that its holders move to,
        and the memory's version is bumped. Returns (old name, weakly; new name) pairs: the caller replaces the old
        names in what it keeps, then calls ``keep_old_values``. (One call for all of a replay's buffers: a decoder's
        step writes two caches per layer, and the common case, names only their holders read, is a comparison.)"""
        renamed = []
        for buf in bufs:
            base = buf.base
            names = base.names
            if names is None:
                names = self._names(base)
            pruned = False
            for ref in names:
                old = ref()
                if old is None:
                    pruned = True
                    continue
                readers = old.readers
                if readers is not None and readers.mark == readers.changes[0]:
                    continue  # (``_only_holders_read``'s remembered yes: the holders just see the write in place)
                if self._only_holders_read(old):
                    continue
                new = self.new_version(old)
                self.move_holders(old, new)
                renamed.append((weakref.ref(old), new))
            old = None
            if pruned:
                names[:] = [r for r in names if r() is not None]
            self.invalidate(base)
        return renamed

    def _names(self, base: Buffer) -> list[weakref.ref[UOp]]:
        """The names (BUFFER uops) of ``base``'s memory, kept from the first call on (later ones as they are made)."""
        names = base.names
        if names is None:
            names = base.names = [weakref.ref(u) for u, b in list(self._buffers.items()) if b.base is base]
            self._events += 1
        return names

    # ---- memory reused for new values (a transport's receive pool) ----
    def watch_memory(self, buf: Buffer) -> None:
        """Keep every name of ``buf``'s memory from now on (``sole_buffer`` needs them): call it before any tensor
        or view of the memory exists."""
        self._names(buf.base)

    def read_by_capture(self, capture: Any, bufs: Iterable[Buffer]) -> None:
        """``capture`` (a JIT capture) keeps ``bufs`` and reads their memory in every replay until it is garbage; no
        name of the memory tells (a kernel argument is a Buffer), so ``sole_buffer`` says no for it meanwhile."""
        bases = list(dict.fromkeys(b.base for b in bufs))
        for b in bases:
            self._captured[b] = self._captured.get(b, 0) + 1
        self._events += 1
        weakref.finalize(capture, self._release_captured, bases)

    def _release_captured(self, bases: list[Buffer]) -> None:
        for b in bases:
            left = self._captured.get(b, 0) - 1
            if left > 0:
                self._captured[b] = left
            else:
                self._captured.pop(b, None)

    def buffer_under(self, node: UOp) -> Buffer | None:
        """The Buffer behind the BUFFER uop under ``node``'s movement ops, or None (``node`` computes something)."""
        name = base_buffer_uop(node)
        return self._buffers.get(name) if name is not None else None

    def sole_buffer(self, node: UOp) -> Buffer | None:
        """The Buffer under ``node`` (a realized tensor's node: movement ops over a BUFFER uop) when nothing but
        ``node`` itself reads that memory: no tensor, lazy graph or pending write, no other name of the memory (it
        must be watched, ``watch_memory``), no other view of its base and no JIT capture (``read_by_capture``);
        else None.

        Such memory may take a new value in place (``invalidate`` it) and a new tensor be made over ``node``
        (``Tensor(node)``, then ``hold``): the same node serves message after message, nothing is built per
        message. Dead references met on the way are dropped."""
        chain = [node]  # node, ..., its BUFFER uop
        name = node
        while name.op in MOVEMENT:
            name = name.src[0]
            chain.append(name)
        buf = self._buffers.get(name) if name.op is _BUFFER else None
        if buf is None or name in self.pending:
            return None
        base = buf.base
        if base.views_alive > (buf is not base) or base in self._captured:
            return None
        names = base.names
        if names is None or not _only_live(names, name):
            return None
        above = None
        for n in chain:  # (each node of the chain is read only by the one above it)
            readers = n.readers
            if readers is None or not _only_live(readers, above):
                return None
            above = n
        return buf

    def lend(self, node: UOp, tensor: Any, lease: Lease | None = None) -> Lease:
        """Hold ``tensor``, made over ``node`` once ``sole_buffer(node)`` (or ``returned``) said nothing else reads its
        memory, and remember what reads the memory now: ``returned`` then tells in constant time when the tensor is
        gone and nothing else read the memory meanwhile. Updates ``lease`` (the one of the last loan of the same
        node) or makes one."""
        if lease is None:
            lease = Lease()
        held = lease.held
        if held is None or lease.events != self._events or lease.node is not node:
            self.hold(tensor)  # (its holders' table is found once per lease; no event can replace it since)
            name = base_buffer_uop(node)
            assert name is not None and node.readers is not None, "lend needs a node sole_buffer said yes to"
            lease.node, lease.buf, lease.held = node, self._buffers[name], self._holders.get(name)
        else:
            if len(held) >= 16:  # (as hold: dead holders of earlier loans)
                for key in [k for k, r in held.items() if r() is None]:
                    del held[key]
            held[id(tensor)] = weakref.ref(tensor)
        lease.holder = weakref.ref(tensor)
        lease.changes = node.readers.changes[0]  # type: ignore[union-attr]
        lease.events, lease.views = self._events, lease.buf.base.views_alive
        return lease

    def returned(self, lease: Lease) -> Buffer | None:
        """The memory of ``lend``'s loan when its tensor is gone and nothing else read the memory since: nothing new
        read the node or a view of its name (their readers' count), no watched memory anywhere got a name, a pending
        write or a JIT capture (``_events``) and its base has as many live views. Else None: then ``sole_buffer``
        decides (this check is conservative)."""
        if lease.holder() is not None or lease.events != self._events:
            return None
        buf = lease.buf
        if lease.node.readers.changes[0] != lease.changes or buf.base.views_alive != lease.views:  # type: ignore
            return None
        return buf

    def _only_holders_read(self, name: UOp) -> bool:
        """Whether nothing but ``name``'s holders reads it (``_read_by_others``). A yes is remembered on its readers
        (``mark``) until something new reads the name or a view of it, so asking again costs a comparison."""
        readers = name.readers
        if readers is not None and readers.mark == readers.changes[0]:
            return True
        if readers is None or self._read_by_others(name):
            return False
        readers.mark = readers.changes[0]
        return True

    def _read_by_others(self, name: UOp) -> bool:
        """Whether anything but the tensors realized into ``name`` (its holders) reads it: a live node built on it
        or on a view of it (a lazy graph, a pending write), or a tensor that is such a view but no holder (an
        alias). Conservatively True for a name that was not watched from birth, or a holder over several views."""
        name_readers = name.readers
        if name_readers is None:
            return True
        held = self._holders.get(name)
        holders = [t for r in held.values() if (t := r()) is not None] if held else []
        views = {t.uop for t in holders}
        for v in views:
            if v.src != (name,):
                return True
        for ref in name_readers:
            x = ref()
            if x is not None and x not in views and _reads_as_other(x, name, views, holders):
                return True
        for v in views:
            for ref in v.readers or ():
                x = ref()
                if x is not None and _reads_as_other(x, name, views, holders):
                    return True
        return False

    def keep_old_values(self, renamed: list[tuple[weakref.ref[UOp], UOp]]) -> None:
        """After ``rename_for_overwrite``: an old name still alive is read by a lazy graph built before the write,
        so its contents are copied aside for it (as an assign does)."""
        for ref, _ in renamed:
            old = ref()
            if old is not None:
                self.preserve(old)
            del old


class Lease:
    """What ``RealizationState.lend`` saw when it handed memory out over a node to one tensor."""

    __slots__ = ("node", "buf", "held", "holder", "changes", "events", "views")

    def __init__(self) -> None:
        self.node: Any = None
        self.buf: Any = None
        self.held: dict[int, weakref.ref[Any]] | None = None  # the holders' table of the node's name
        self.holder: Callable[[], Any] = _gone  # the tensor lent, weakly
        self.changes = self.events = self.views = -1


def _gone() -> None:
    """(no tensor lent yet)"""


def _reads_as_other(x: Any, name: UOp, views: set[UOp], holders: list[Any]) -> bool:
    """Whether the reader ``x`` of ``name`` (or of a holder's view of it) reads it other than as a holder: a node
    built on it does; a tensor does while it still names it (is it, or one of the views) and is no holder."""
    if isinstance(x, UOp):
        return True
    return (x.uop is name or x.uop in views) and all(t is not x for t in holders)


def _only_live(refs: list[Any], allowed: Any) -> bool:
    """Whether ``allowed`` (or nothing) is the only live object ``refs`` (weak references) point to; drops the dead
    ones."""
    only, dead = True, False
    for r in refs:  # (a plain loop: this runs per message of a transport's receive pool)
        x = r()
        if x is None:
            dead = True
        elif x is not allowed:
            only = False
    if dead:
        refs[:] = [r for r in refs if r() is not None]
    return only


def _numel(u: UOp) -> int:
    """Elements of a tensor-level uop; a reshaped buffer's from its arg (a new uop's shape is not cached yet)."""
    return prod(u.arg) if u.op is _RESHAPE and u.src[0].op is _BUFFER else prod(shape_of(u))


def _stale(reads: _Reads) -> bool:
    """Whether any still-existing buffer of ``reads`` was written since its version was taken."""
    for ref, version in reads:
        b = ref()
        if b is not None and b.version != version:
            return True
    return False


REALIZATION = RealizationState()
