"""Renderer base: what codegen needs to know about a target, and the hook that emits code.

In:  a linearized kernel (list of UOps, when ``linear`` is true) or the kernel SINK itself.
Out: program text or bytes for the renderer's ``compiler``.

A renderer describes its target as data (SIMD widths, threads, a legalization matcher, a
placement-priority hook, the machine's vector registers and caches); codegen reads these
attributes and never asks which renderer it is talking to. Machine-code backends build on
``ISARenderer`` (``tgcore.renderer.isa``): isel rules, register allocation and encoding as
stages; its names load on first use from here.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from tgcore.dtype import DType
from tgcore.runtime.cpufeatures import CacheSizes
from tgcore.uop import UOp


class Renderer:
    device: str = ""               # the device this renderer targets ("CPU")
    name: str = ""                 # the variant name ("C", "X86")
    linear: bool = True            # render() gets a linear list; False: the kernel SINK (REDUCE form)
    has_threads: bool = False      # kernels take a core_id and split their outer loop across threads
    simd_widths: dict[DType, int] = {}  # vector lanes per scalar dtype codegen may use
    # wider lanes for a kernel with no reduction, per scalar dtype (each lane's value is computed alone: the width
    # changes no result, where a reduction's lanes set its order of sums); {}: simd_widths
    elementwise_widths: dict[DType, int] = {}
    emulated_floats: frozenset[DType] = frozenset()  # dtypes whose arithmetic codegen does in float32
    native_transcendentals: bool = False  # True: EXP2/LOG2/SIN reach render(); False: codegen decomposes them
    masked_vectors: bool = False   # a vector load/store may be gated lane by lane (INDEX gate: a bool vector)
    gathers: bool = False          # a vector load may take a vector of indices, one per lane (a table lookup)
    custom_kernels: bool = False   # render() also takes hand-written programs (tgcore.custom)
    # a scalar loop summing products of bytes in int32 (a quantized weight's integers times an 8-bit activation's)
    # is vectorized into multiply-adds of bytes by the output's compiler: codegen leaves such loops scalar; a block
    # summed in lanes of 4 neighbouring bytes is one multiply-add of bytes per lane (C: ``cbytedot``; X86 with
    # AVX512-VNNI: vpdpbusd)
    compiles_byte_dots: bool = False
    # 32 byte lanes looked up in a table of 16 bytes at byte indices (a 4-bit code's values: IQ4_NL, MXFP4) are one
    # vector op (a byte shuffle: vpshufb, tbl); False: lane by lane, so a product that needs them may prefer floats
    byte_table_lookups: bool = False
    # (source, stored) dtypes of a vector CAST the renderer narrows in the STORE (e.g. int32 lanes stored as bytes):
    # codegen vectorizes such a store at the source's width even when the stored dtype has none in simd_widths
    narrowing_stores: frozenset[tuple[DType, DType]] = frozenset()
    # the most weight rows a lane byte-dot product of 2-4 batch rows (a batched decode step) unrolls beside them, with
    # 32 vector registers (``heuristic._byte_dot_opts``): more share each batch row's block sums, if the renderer
    # keeps their accumulators in registers
    batch_weight_rows: int = 4
    # a byte-dot product with its output rows in the lanes (a weight's rows interleaved by 4 bytes, the activations'
    # 4 bytes broadcast: tg-gguf's ``lanes``) is one multiply-add of bytes per 4 elements of 8 rows (C:
    # ``cbytedot.row_lanes_dot``); False: a product that would take that layout keeps the activations in the lanes
    row_lane_byte_dots: bool = False
    # weight rows (int32 lanes) per vector of such a product: the weight's rows are interleaved in groups of this
    # many (tg-gguf's ``lanes.repack`` asks); 16 where 512-bit multiply-adds of bytes are worth it (C with AVX512-VNNI)
    row_lane_rows: int = 8
    # the factors of a super-block's sub-blocks (K-quant scales) may be unpacked as one small vector whose lanes the
    # unrolled sub-blocks take (``OptOps.SPREAD``): vectors of a few bytes, shuffles, lane extracts
    vector_block_factors: bool = False
    # such a sum's operand read as rows of 4 or 8 bytes from a table at offsets computed per row (an i-quant grid's)
    # becomes one gather of the rows, their offsets computed together (C: ``crowgather.row_gather``); False: a load
    # and an insert per row, or lane by lane
    gathers_table_rows: bool = False
    # vectors of bytes multiply (wrapping) as vectors (C: gcc and clang emulate one with 16-bit multiplies); False:
    # lane by lane (X86 today)
    multiplies_byte_vectors: bool = False
    # innermost loops of at most this many iterations (a constant count) are unrolled by codegen
    # (``codegen.unroll``); 0: left as loops (a C compiler unrolls them itself)
    unrolled_trips: int = 0
    # the machine the output runs on, for cost models (a CPU renderer sets them from tgcore.runtime.cpufeatures;
    # simd_widths, not these, says what vectors codegen emits)
    vector_bits: int = 128         # width of one vector register the compiled code may use
    vector_registers: int = 16     # vector registers the compiled code may use
    cache_sizes: CacheSizes = CacheSizes()  # per-core data caches (L1d, L2) in bytes, for tiling
    legalize: Any = None           # a PatternMatcher applied before linearizing, or None
    placement_priority: Callable[[UOp], int] | None = None
    compiler: Any = None           # turns render() output into bytes for the device's program loader
    program: Any = None            # a program loader class of the renderer's own (default: the device's)

    def render(self, name: str, kernel: list[UOp] | UOp) -> str | bytes:
        raise NotImplementedError

    def listing(self, output: str | bytes) -> tuple[str, str]:
        """``render``'s output as text for people (``tg viz serve``) and its language ("c", "asm" or "text");
        by default the text as it is, or the bytes in hex."""
        if isinstance(output, str):
            return output, "text"
        return "\n".join(f"{i:06x}  {output[i:i + 16].hex(' ')}" for i in range(0, len(output), 16)), "text"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}:{self.name}>"


def __getattr__(name: str) -> Any:
    """The ISA pipeline's names (``tgcore.renderer.isa.__all__``), imported when first asked for."""
    if not name.startswith("_") and name != "isa":  # probes (pickle, inspect) and the submodule itself
        isa = importlib.import_module("tgcore.renderer.isa")
        if name in getattr(isa, "__all__", ()):  # (no __all__ yet while isa is being imported)
            return getattr(isa, name)
    raise AttributeError(f"module 'tgcore.renderer' has no attribute {name!r}")
