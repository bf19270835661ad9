"""The arg of a RANGE loop: which axis of the kernel it walks and what kind of loop it is.

In:  nothing (pure definitions).
Out: ``RangeKind`` (output, reduced, thread, tile or lane loop), ``SplitPart`` (which loop of a split reduced
     axis) and ``AxisArg``, the frozen record every RANGE loop carries as its arg. The scheduler makes GLOBAL and
     REDUCE loops; the optimizations (``tgcore.codegen.optimize``) split them into the other kinds.

Two loops are one UOp when their end and arg are equal, so the record names every loop an optimization list can
make apart: a loop of a later split of the same axis differs by ``split``. ``nesting_key`` orders loops the way
codegen nests them (outermost first).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class RangeKind(enum.Enum):
    """What a RANGE loop walks."""
    GLOBAL = "global"  # an output axis: one loop per axis of the stored shape
    REDUCE = "reduce"  # a reduced axis (with ``parts``: the loops a TILE or BLOCK left of it)
    THREAD = "thread"  # one thread's chunk of an output axis (``AxisArg.threads`` threads share the loop)
    TILE = "tile"      # the outer loop of a TILE: its partial sums go to memory, so it runs outside the output loops
    UPCAST = "upcast"  # the lanes (UPCAST) or copies (UNROLL) of an axis; expanded away before the loops are ordered


class SplitPart(enum.Enum):
    """Which loop of a split reduced axis a loop is (``AxisArg.parts`` lists the splits, first to last). What is left
    of an axis after an UPCAST or UNROLL of all of it is its lanes, so a later TILE or BLOCK splits an UPCAST loop."""
    IN_TILE = "in tile"    # what a TILE keeps inside the reduction (its outer loop is a TILE range)
    BLOCK = "block"        # the loop over quantization blocks
    IN_BLOCK = "in block"  # the loop inside one block


# nesting order, outermost first: threads, reduction tiles (their partial sums go to memory), outputs, reductions
_NESTING = {RangeKind.THREAD: 0, RangeKind.TILE: 1, RangeKind.GLOBAL: 2, RangeKind.REDUCE: 3, RangeKind.UPCAST: 4}
_PART_ORDER = {SplitPart.BLOCK: 0, SplitPart.IN_BLOCK: 1, SplitPart.IN_TILE: 2}  # a block loop encloses its inside


@dataclass(frozen=True)
class AxisArg:
    axis: int                            # the scheduler's number of the axis (output and reduced axes apart)
    kind: RangeKind
    parts: tuple[SplitPart, ...] = ()    # REDUCE (or its lanes): the splits of the axis that made this loop, in order
    split: int = 0                       # which split of the axis made this loop (0: the first, or none)
    lanes_of: RangeKind | None = None    # UPCAST: the kind of the axis whose lanes or copies these are
    threads: int = 0                     # THREAD: how many threads share the loop

    def __post_init__(self) -> None:
        if type(self.axis) is not int or not isinstance(self.kind, RangeKind):
            raise TypeError(f"AxisArg needs an int axis and a RangeKind, got {self.axis!r}, {self.kind!r}")
        if self.parts and self.kind not in (RangeKind.REDUCE, RangeKind.UPCAST):
            raise ValueError(f"only a reduced axis (or its lanes) is split into parts, not a {self.kind.name} loop")
        if (self.lanes_of is not None) != (self.kind is RangeKind.UPCAST):
            raise ValueError(f"lanes_of names the axis of an UPCAST loop (kind {self.kind.name}, {self.lanes_of})")
        if (self.threads > 0) != (self.kind is RangeKind.THREAD):
            raise ValueError(f"a THREAD loop, and only one, says how many threads share it ({self.threads})")

    def nesting_key(self) -> tuple:
        """Sorts loops in the order codegen nests them: by kind (threads, tiles, outputs, reductions, lanes), then
        by axis, then the loops of one axis by how it was split."""
        lanes = _NESTING[self.lanes_of] if self.lanes_of is not None else -1
        return (_NESTING[self.kind], self.axis, lanes, tuple(_PART_ORDER[p] for p in self.parts), self.split)

    def __str__(self) -> str:  # e.g. 0_reduce_in tile_1 (used in debug renders: r0_reduce_in tile_1)
        words: list[object] = [self.axis, self.kind.value]
        if self.lanes_of is not None:
            words.append(self.lanes_of.value)
        words += [p.value for p in self.parts]
        words += [n for n in (self.split, self.threads) if n]
        return "_".join(str(w) for w in words)

    def __repr__(self) -> str:  # deterministic and short: only the fields that are not their default
        extra = [f"parts={'+'.join(p.name for p in self.parts)}"] if self.parts else []
        extra += [f"{name}={v}" for name, v in (("split", self.split), ("threads", self.threads)) if v]
        extra += [f"lanes_of={self.lanes_of.name}"] if self.lanes_of is not None else []
        return f"AxisArg({', '.join([str(self.axis), self.kind.name, *extra])})"
