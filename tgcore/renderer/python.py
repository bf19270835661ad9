"""The PYTHON renderer: hands the kernel graph itself to the interpreter.

In:  a kernel SINK in REDUCE form (``linear = False``: codegen skips accumulators and linearizing).
Out: bytes: the pickled SINK, which ``tgcore.runtime.python.PythonProgram`` unpickles and interprets.
"""
from __future__ import annotations

import pickle

from tgcore.renderer import Renderer
from tgcore.runtime.compiler import Compiler
from tgcore.uop import Ops, UOp


class PythonCompiler(Compiler):
    """Nothing to compile: the rendered bytes are the program. No disk cache."""

    cache_key = None

    def compile(self, src: str | bytes) -> bytes:  # type: ignore[override]
        return src.encode() if isinstance(src, str) else bytes(src)


class PythonRenderer(Renderer):
    device = "PYTHON"
    name = "PY"
    linear = False
    has_threads = False
    compiler = PythonCompiler()

    def render(self, name: str, kernel: list[UOp] | UOp) -> bytes:
        if not isinstance(kernel, UOp) or kernel.op is not Ops.SINK:
            raise TypeError(f"PythonRenderer renders a kernel SINK (linear = False), got {type(kernel).__name__}")
        return pickle.dumps(kernel, protocol=pickle.HIGHEST_PROTOCOL)
