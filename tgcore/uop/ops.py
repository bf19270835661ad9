"""The operation set of the graph IR.

In:  nothing (pure definitions).
Out: `Ops`, the enum of every node kind, grouped by role, and `GroupOp`, frozensets of ops that
     share a property (arity, commutativity, role) so passes can match or dispatch on a group.

Every stage of the pipeline (tensor graph, kernels, loops, linear programs, machine instructions)
uses this one enum; a stage's spec says which ops may exist after it.
"""

from __future__ import annotations

import enum


class Ops(enum.Enum):
    """Every kind of UOp. The meaning of `src` and `arg` for each op is noted next to it."""

    # -- buffers, parameters and definitions --
    BUFFER = enum.auto()  # a device buffer; arg = size, src = (UNIQUE, DEVICE)
    BUFFER_VIEW = enum.auto()  # a view into a buffer; arg = (size, offset)
    UNIQUE = enum.auto()  # a unique id so equal-looking buffers stay distinct; arg = int
    DEVICE = enum.auto()  # where a buffer lives; arg = device string
    PARAM = enum.auto()  # a kernel parameter (pointer or scalar); arg = slot index
    DEFINE_GLOBAL = enum.auto()  # a global memory pointer argument; arg = slot index
    DEFINE_LOCAL = enum.auto()  # workgroup-shared memory; arg = name
    DEFINE_REG = enum.auto()  # register / accumulator storage; arg = id
    DEFINE_VAR = enum.auto()  # a bounded symbolic integer; arg = (name, lo, hi)
    BIND = enum.auto()  # a DEFINE_VAR bound to a value; src = (DEFINE_VAR, CONST)
    COPY = enum.auto()  # copy a buffer to another device; src = (value, DEVICE)
    ASSIGN = enum.auto()  # write a value into an existing buffer; src = (target, value)
    CONTIGUOUS = enum.auto()  # force a materialised, row-major copy
    DETACH = enum.auto()  # stop gradients
    KERNEL = enum.auto()  # a scheduled kernel; arg = kernel description

    # -- movement (shape-only, no data change) --
    RESHAPE = enum.auto()  # arg = new shape
    PERMUTE = enum.auto()  # arg = axis order
    EXPAND = enum.auto()  # arg = new shape
    PAD = enum.auto()  # arg = ((before, after), ...)
    SHRINK = enum.auto()  # arg = ((start, end), ...)
    FLIP = enum.auto()  # arg = tuple of bools, one per axis

    # -- unary ALU --
    EXP2 = enum.auto()
    LOG2 = enum.auto()
    SIN = enum.auto()
    SQRT = enum.auto()
    RECIPROCAL = enum.auto()
    NEG = enum.auto()
    TRUNC = enum.auto()

    # -- binary ALU --
    ADD = enum.auto()
    SUB = enum.auto()
    MUL = enum.auto()
    IDIV = enum.auto()  # integer division, truncating toward zero (C semantics)
    MOD = enum.auto()  # integer remainder, sign of the dividend (C semantics)
    FDIV = enum.auto()  # float division
    POW = enum.auto()
    MAX = enum.auto()
    CMPLT = enum.auto()
    CMPNE = enum.auto()
    CMPEQ = enum.auto()
    AND = enum.auto()
    OR = enum.auto()
    XOR = enum.auto()
    SHL = enum.auto()
    SHR = enum.auto()  # arithmetic for signed, logical for unsigned

    # -- ternary ALU --
    WHERE = enum.auto()  # src = (cond, if_true, if_false)
    MULACC = enum.auto()  # a * b + c; float: rounded once (backends contract, like C) or twice (interpreter, folding)

    # -- reductions --
    REDUCE_AXIS = enum.auto()  # tensor-level reduce; arg = (Ops.ADD | Ops.MAX | Ops.MUL, axes)
    REDUCE = enum.auto()  # kernel-level reduce over ranges; src = (value, *RANGE); arg = Ops.ADD | ...
    ALLREDUCE = enum.auto()  # reduce across devices

    # -- memory access --
    INDEX = enum.auto()  # pointer arithmetic; src = (buffer, *indices[, gate])
    LOAD = enum.auto()  # src = (INDEX[, alt value])
    STORE = enum.auto()  # src = (INDEX, value)

    # -- control flow --
    RANGE = enum.auto()  # a loop counter 0 .. end-1; src = (end,), arg = AxisArg (uop/axis.py);
    #                      a tensor-level arange has src = (), arg = ("arange", n)
    END = enum.auto()  # closes loops; src = (body, *RANGE)
    IF = enum.auto()  # src = (cond, ...)
    ENDIF = enum.auto()  # src = (IF,)
    BARRIER = enum.auto()  # workgroup barrier

    # -- graph structure --
    SINK = enum.auto()  # the root: every output hangs off it
    GROUP = enum.auto()  # several effects treated as one
    AFTER = enum.auto()  # src[0] once src[1:] are done (ordering without data)
    NOOP = enum.auto()

    # -- constants --
    CONST = enum.auto()  # arg = Python value (scalar, broadcast over a vector dtype)
    VCONST = enum.auto()  # arg = tuple of Python values, one per lane

    # -- conversions --
    CAST = enum.auto()
    BITCAST = enum.auto()

    # -- vectors --
    VECTORIZE = enum.auto()  # build a vector from scalars; src = lanes
    GEP = enum.auto()  # pick lanes; arg = tuple of lane indices
    CAT = enum.auto()  # concatenate vectors

    # -- special hardware --
    WMMA = enum.auto()  # tensor-core matrix multiply-accumulate; arg = description
    SPECIAL = enum.auto()  # GPU grid / thread id; src = (size,), arg = name like "gidx0"

    # -- machine level --
    INS = enum.auto()  # one machine instruction (ISA backends); arg = instruction description
    PROGRAM = enum.auto()  # a compiled program: src = (SINK, ...), arg = metadata
    LINEAR = enum.auto()  # a linearised program: src = the uops in order
    SOURCE = enum.auto()  # rendered source text; arg = str
    BINARY = enum.auto()  # compiled bytes; arg = bytes

    # -- escape hatches --
    CUSTOM = enum.auto()  # inline code statement; arg = format string
    CUSTOMI = enum.auto()  # inline code expression; arg = format string
    CUSTOM_KERNEL = enum.auto()  # a hand-written kernel scheduled like any other; arg = description

    # members are singletons: the identity hash is correct and, unlike Enum's, runs in C
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    def __lt__(self, other: Ops) -> bool:  # so ops sort (e.g. for canonical orders)
        return self.value < other.value


class GroupOp:
    """Named sets of ops. Frozensets, so `op in GroupOp.ALU` is a hash lookup."""

    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.POW, Ops.MAX,
                        Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary

    # a op b == b op a
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    # (a op b) op c == a op (b op c)
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX})
    # result dtype is bool
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    # integer-only ops
    Integer = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR})
    # x op x == x
    Idempotent = frozenset({Ops.AND, Ops.OR, Ops.MAX})

    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Buffer = frozenset({Ops.BUFFER, Ops.BUFFER_VIEW, Ops.PARAM, Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
    Defines = frozenset({Ops.PARAM, Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG, Ops.DEFINE_VAR})
    Reduce = frozenset({Ops.REDUCE_AXIS, Ops.REDUCE, Ops.ALLREDUCE})
    Memory = frozenset({Ops.INDEX, Ops.LOAD, Ops.STORE})
    Control = frozenset({Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.BARRIER})
    Const = frozenset({Ops.CONST, Ops.VCONST})
    Cast = frozenset({Ops.CAST, Ops.BITCAST})
    Program = frozenset({Ops.PROGRAM, Ops.LINEAR, Ops.SOURCE, Ops.BINARY})
    Custom = frozenset({Ops.CUSTOM, Ops.CUSTOMI, Ops.CUSTOM_KERNEL})
