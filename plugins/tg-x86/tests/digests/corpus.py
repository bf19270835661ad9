"""A named corpus of kernels and the sha256 of the machine code the X86 renderer makes for each.

In:  nothing but this file: the workloads below build lazy tensors (``Tensor.empty``: codegen reads shapes and
     dtypes only; nothing runs), the scheduler cuts them into kernels.
Out: ``digests(isa=...)`` -> {"workload/k name": sha256 hex of the kernel's machine code} at ISA level ``isa``;
     ``python corpus.py --write`` stores them for every level in ``DIGEST_FILES`` next to this file (what
     ``test_x86_digests.py`` compares against): ``machine_code.json`` (AVX2), ``machine_code_avx512.json``;
     ``python corpus.py`` compares with them and prints what changed (exit status 1 if anything did).

The machine code must not depend on the machine that makes it, so everything the X86 renderer and the
optimization heuristic read from the host is pinned here: the ABI (System V), the cache sizes the heuristic
tiles for (``CacheSizes()``'s defaults), the threads a kernel may split over (``THREADS``) and the ISA
level (``ISAS``: the renderer is told the level, so it reads no CPU feature; each level has its own digests).
A change to the renderer that changes the code on purpose regenerates the files (see ``test_x86_digests.py``).

The workloads: the kernels of ``plugins/tg-x86/bench/x86.py`` and ``bench/ops.py`` (smaller shapes where the
shape does not pick another code path; the GEMM and conv shapes of the benches kept, their tiling depends on
them) and a representative set of the core suite's (elementwise, reductions, casts, narrow floats, integer
types, where/compare, matmul, conv forward and backward, pooling, cumsum, argmax, gathers, quantized-block
dequantization, tg-gguf's integer products: byte dots with the activations or the weight's rows in the lanes).
"""
from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import tgcore.nn.functional as F
from tgcore.codegen import get_program
from tgcore.dtype import dtypes
from tgcore.runtime.cpufeatures import CacheSizes
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import UOp

THREADS = 2          # the core_ids a kernel may split over (the heuristic's thread split)
# the X86 renderer's vector levels (ymm pieces; float32 vectors of 16k lanes in zmm), each with its digests
DIGEST_FILES = {"avx2": Path(__file__).with_name("machine_code.json"),
                "avx512": Path(__file__).with_name("machine_code_avx512.json")}
ISAS = tuple(DIGEST_FILES)
VECTOR_BITS = {"avx2": 256, "avx512": 512}
# the byte dots' instruction per level (the renderer would read it from the CPU: pinned, as the level is)
DOTS = {"avx2": "vpmaddubsw", "avx512": "vpdpbusd"}
DEV = "CPU"


def renderer(isa: str = "avx2"):  # noqa: ANN201 (the plugin's renderer; imported here so the module loads without it)
    """The X86 renderer at level ``isa`` with every host-dependent input pinned (see the module doc)."""
    from tg_x86.abi import SYSV
    from tg_x86.renderer import X86Renderer
    r = X86Renderer(abi=SYSV, isa=isa, dots=DOTS[isa])
    r.cache_sizes = CacheSizes()
    if r.vector_bits != VECTOR_BITS[isa]:
        raise AssertionError(f"the corpus pins ISA={isa}, the renderer declares {r.vector_bits}-bit vectors")
    return r


def f32(*shape: int) -> Tensor:
    return Tensor.empty(*shape, dtype=dtypes.float32, device=DEV)


def of(dt, *shape: int) -> Tensor:  # noqa: ANN001
    return Tensor.empty(*shape, dtype=dt, device=DEV)


def _q4_dequant_matvec() -> Tensor:
    """GGUF Q4_0-style blocks (an f16 scale, 16 bytes of 4-bit weights per 32 values: the low nibbles are values
    0-15 of a block, the high ones 16-31), dequantized inside a GEMV."""
    rows, blocks = 64, 8
    q = of(dtypes.uint8, rows, blocks, 16)
    d = of(dtypes.float16, rows, blocks, 1).cast(dtypes.float32)
    lo = ((q & 0xF).cast(dtypes.int8) - 8).cast(dtypes.float32) * d
    hi = ((q >> 4).cast(dtypes.int8) - 8).cast(dtypes.float32) * d
    x_lo, x_hi = f32(blocks, 16), f32(blocks, 16)
    return (lo * x_lo).sum((1, 2)) + (hi * x_hi).sum((1, 2))


def _nibbles(packed: Tensor, axis: int) -> Tensor:
    """Bytes -> their low nibbles, then their high ones, along a new axis of 2 before ``axis`` (Q4's order)."""
    shape = list(packed.shape)
    wide = packed.reshape(*shape[:axis], 1, *shape[axis:]).expand(*shape[:axis], 2, *shape[axis:])
    half = Tensor.arange(2, dtype=dtypes.uint8, device=DEV).reshape(*[1] * axis, 2, *[1] * (len(shape) - axis)) * 4
    return (wide >> half) & 15


def _byte_dot_q4() -> Tensor:
    """tg-gguf's integer product with the activations in the lanes (``tg_gguf.intdot``): each block's 4-bit values
    (unsigned, nibbles) times int8 activations summed in int32 per lane of 4 neighbouring bytes (a byte dot:
    vpdpbusd, or vpmaddubsw + vpmaddwd), then scaled."""
    rows, blocks = 12, 4
    u = _nibbles(of(dtypes.uint8, rows, blocks, 16), 2).reshape(rows, blocks, 8, 4).permute(0, 1, 3, 2)
    x = of(dtypes.int8, blocks, 32).reshape(1, blocks, 8, 4).permute(0, 1, 3, 2)
    prod = (u.cast(dtypes.int32) * x.cast(dtypes.int32)).cast(dtypes.float32)
    return (prod * f32(rows, blocks).reshape(rows, blocks, 1, 1)).reshape(rows, -1).sum(-1)


def _row_lane_q4() -> Tensor:
    """tg-gguf's row-lane product (``tg_gguf.lanes``): 8 weight rows' 4-bit values interleaved by 4 bytes per block
    (the low nibbles steps 0-3, the high ones 4-7), each block's 8 dots of 8 rows against 4 activation bytes
    broadcast, chained through the accumulator."""
    groups, blocks, m = 2, 4, 1
    u = _nibbles(of(dtypes.uint8, groups, blocks, 4, 8, 4), 2).reshape(1, groups, blocks, 8, 8, 4)
    w = u.permute(0, 1, 4, 2, 3, 5).cast(dtypes.int32)
    x = of(dtypes.int8, m, blocks, 32).reshape(m, 1, 1, blocks, 8, 4).cast(dtypes.int32)
    prod = (w * x).cast(dtypes.float32) * f32(groups, 8, blocks).reshape(1, groups, 8, blocks, 1, 1)
    return prod.reshape(m, groups * 8, blocks * 32).sum(-1)


def _conv_backward() -> list[Tensor]:
    x, w = f32(2, 8, 14, 14), f32(8, 8, 3, 3)
    x.requires_grad_(True)
    w.requires_grad_(True)
    loss = F.conv2d(x, w, padding=1).sum()
    loss.backward()
    return [x.grad, w.grad]


# name -> a function building the tensors whose kernels make up the workload
WORKLOADS: dict[str, Callable[[], Tensor | list[Tensor]]] = {
    # plugins/tg-x86/bench/x86.py
    "add": lambda: f32(4096) + f32(4096),
    "mul-add": lambda: f32(4096) * f32(4096) + 1.0,
    "relu": lambda: f32(4096).relu(),
    "where-lt": lambda: (lambda a, b: (a < b).where(a, b))(f32(4096), f32(4096)),
    "exp": lambda: f32(4096).exp(),
    "sqrt-abs": lambda: f32(4096).abs().sqrt(),
    "sum": lambda: f32(1 << 16).sum(),
    "max": lambda: f32(1 << 16).max(),
    "sum-rows": lambda: f32(256, 256).sum(1),
    "sum-cols": lambda: f32(256, 256).sum(0),
    "transpose": lambda: f32(256, 256).T.contiguous(),
    "matmul-256": lambda: f32(256, 256) @ f32(256, 256),
    "matmul-512": lambda: f32(512, 512) @ f32(512, 512),
    "matmul-1024": lambda: f32(1024, 1024) @ f32(1024, 1024),
    "softmax": lambda: F.softmax(f32(64, 1024)),
    "conv2d-3x3": lambda: F.conv2d(f32(4, 16, 64, 64), f32(32, 16, 3, 3), padding=1),
    "int-add-mul": lambda: (lambda i: i * 3 + i)(of(dtypes.int32, 4096)),
    "int-floordiv": lambda: of(dtypes.int32, 4096) // 7,
    "cast-f32-i32": lambda: f32(4096).cast(dtypes.int32),
    "cast-i32-f32": lambda: of(dtypes.int32, 4096).cast(dtypes.float32),
    "cast-f16-f32": lambda: of(dtypes.float16, 4096).cast(dtypes.float32),
    "cast-f32-bf16": lambda: f32(4096).cast(dtypes.bfloat16),
    # bench/ops.py
    "matmul-1000": lambda: f32(1000, 1000) @ f32(1000, 1000),
    "batched-16x256": lambda: f32(16, 256, 256) @ f32(16, 256, 256),
    "conv2d-64ch-56": lambda: F.conv2d(f32(8, 64, 56, 56), f32(64, 64, 3, 3), padding=1),
    # the core suite's kinds of kernels
    "odd-matmul": lambda: f32(7, 129) @ f32(129, 127),
    "matvec": lambda: f32(1000, 256) @ f32(256),
    "linear": lambda: F.linear(f32(32, 784), f32(512, 784), f32(512)),
    "conv2d-backward": _conv_backward,
    "max-pool": lambda: F.max_pool2d(f32(2, 4, 16, 16), 2),
    "avg-pool": lambda: F.avg_pool2d(f32(2, 4, 16, 16), 3, stride=2, padding=1),
    "layer-norm": lambda: F.layer_norm(f32(16, 96), 96),
    "rms-norm": lambda: F.rms_norm(f32(16, 96), 96),
    "log-softmax": lambda: F.log_softmax(f32(8, 100)),
    "cumsum": lambda: f32(37, 100).cumsum(1),
    "argmax": lambda: f32(33, 70).argmax(1),
    "embedding": lambda: F.embedding(of(dtypes.int32, 5, 7), f32(100, 16)),
    "index-gather": lambda: f32(50, 8)[of(dtypes.int32, 13)],
    "mean-var": lambda: (lambda x: ((x - x.mean(0)) ** 2).mean(0))(f32(31, 17)),
    "sigmoid-sin": lambda: f32(1000).sigmoid() + f32(1000).sin(),
    "f16-arith": lambda: of(dtypes.float16, 100) * of(dtypes.float16, 100) + 1.5,
    "bf16-sum": lambda: of(dtypes.bfloat16, 64, 33).sum(1),
    "f64-arith": lambda: (of(dtypes.float64, 129) / 3.0).maximum(of(dtypes.float64, 129)),
    "f64-matmul": lambda: of(dtypes.float64, 17, 19) @ of(dtypes.float64, 19, 23),
    "int8-ops": lambda: (of(dtypes.int8, 100) * 3 - of(dtypes.int8, 100)) // 5,
    "uint8-shift": lambda: (of(dtypes.uint8, 100) >> 3) ^ (of(dtypes.uint8, 100) << 1),
    "int16-mod": lambda: of(dtypes.int16, 77) % 9,
    "uint32-max": lambda: of(dtypes.uint32, 77).maximum(of(dtypes.uint32, 77)),
    "int64-arith": lambda: of(dtypes.int64, 65) * of(dtypes.int64, 65) - 5,
    "uint64-div": lambda: of(dtypes.uint64, 65) // of(dtypes.uint64, 65),
    "int-sum": lambda: of(dtypes.int32, 1000).sum(),
    "bool-logic": lambda: ((f32(100) > 0) & (f32(100) < 1)) | (f32(100) == 0.5),
    "compare-where-int": lambda: (of(dtypes.int32, 100) != 3).where(of(dtypes.int32, 100), -1),
    "where-f64": lambda: (of(dtypes.float64, 100) < 0).where(0.0, of(dtypes.float64, 100)),
    "casts": lambda: [f32(100).cast(dt) for dt in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint32,
                                                   dtypes.int64, dtypes.uint64, dtypes.float64, dtypes.float16,
                                                   dtypes.bool)],
    "casts-from": lambda: [of(dt, 100).cast(dtypes.float32) for dt in (dtypes.int8, dtypes.uint8, dtypes.uint32,
                                                                         dtypes.int64, dtypes.uint64, dtypes.bool,
                                                                         dtypes.bfloat16)],
    "f64-narrow": lambda: [of(dtypes.float64, 50).cast(dt) for dt in (dtypes.float16, dtypes.bfloat16)],
    "bitcast": lambda: f32(100).bitcast(dtypes.int32) + 1,
    "pad-shrink": lambda: f32(30, 30).pad(((1, 2), (3, 0)))[2:, :20] * 2,
    "flip-permute": lambda: f32(4, 5, 6).flip(1).permute(2, 0, 1).contiguous(),
    "q4-dequant-matvec": _q4_dequant_matvec,
    "byte-dot-q4": _byte_dot_q4,
    "row-lane-q4": _row_lane_q4,
    "symbolic-variable": lambda: f32(64) * Tensor(UOp.variable("start_pos", 0, 4095).bind(3)).float() + 1.0,
}


def kernel_asts(outs: Tensor | list[Tensor]) -> list:
    items, _ = create_schedule([t.uop for t in (outs if isinstance(outs, list) else [outs])], DEV)
    return [si.ast for si in items if si.kind != "copy"]


def digests(names: list[str] | None = None, isa: str = "avx2") -> dict[str, str]:
    """{"workload/k name": sha256 of the machine code} for the named workloads (default: all) at level ``isa``."""
    r = renderer(isa)
    out: dict[str, str] = {}
    for name in names or list(WORKLOADS):
        for k, ast in enumerate(kernel_asts(WORKLOADS[name]())):
            spec = get_program(ast, r, THREADS)
            out[f"{name}/{k} {spec.name}"] = hashlib.sha256(spec.src).hexdigest()
    return out


def write() -> None:
    for isa, path in DIGEST_FILES.items():
        found = digests(isa=isa)
        path.write_text(json.dumps({"isa": isa, "threads": THREADS, "kernels": found}, indent=1, sort_keys=True)
                        + "\n")
        print(f"wrote {len(found)} digests to {path}")


def check() -> int:
    """Compare the renderer's code now with the stored digests of every level; print what changed. 1 if anything
    did (what ``test_x86_digests.py`` asserts), else 0."""
    status = 0
    for isa, path in DIGEST_FILES.items():
        stored: dict[str, str] = json.loads(path.read_text())["kernels"]
        found = digests(isa=isa)
        changed = sorted(k for k in stored.keys() & found.keys() if stored[k] != found[k])
        gone, new = sorted(stored.keys() - found.keys()), sorted(found.keys() - stored.keys())
        if not (changed or gone or new):
            print(f"{path.name}: no change ({len(found)} kernels)")
            continue
        status = 1
        print(f"{path.name}: {len(changed)} changed, {len(gone)} no longer made, {len(new)} new")
        for label, keys in (("changed", changed), ("no longer made", gone), ("new", new)):
            print("".join(f"  {label}: {k}\n" for k in keys), end="")
    return status


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    elif sys.argv[1:]:
        sys.exit("usage: python corpus.py [--write]   (no argument: compare with the stored digests; --write: "
                 "regenerate them from the renderer as it is now)")
    else:
        sys.exit(check())
