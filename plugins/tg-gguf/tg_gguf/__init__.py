"""tg-gguf: read GGUF model files (``tg_gguf.load``), the ``.gguf`` loader for ``tgcore.load``.

``load(path)`` maps the file and parses only its header, metadata and tensor infos; tensor
bytes are zero-copy views of the mapping. ``GGUFFile.tensors`` gives lazy tgcore Tensors whose
dequantization (``tg_gguf.dequant``, tensor ops) fuses into their consumers. ``dequantize_numpy`` (in
``tg_gguf.quants``, needs numpy) is the reference dequantization.
"""
from tg_gguf.constants import GGMLType, GGUFValueType
from tg_gguf.reader import GGUFError, GGUFFile, TensorInfo, from_bytes, load

__all__ = ["GGMLType", "GGUFError", "GGUFFile", "GGUFValueType", "TensorInfo", "dequantize_numpy", "from_bytes",
           "load"]


def __getattr__(name: str):  # dequantize_numpy imports numpy: only when asked for
    if name == "dequantize_numpy":
        from tg_gguf.quants import dequantize_numpy
        return dequantize_numpy
    raise AttributeError(f"module 'tg_gguf' has no attribute {name!r}")
