"""Shapes of tensor-level UOps: moved to `tgcore.uop.shape` (``UOp.shape`` reads them); re-exported here."""
from tgcore.uop.shape import Shape, shape_of

__all__ = ["Shape", "shape_of"]
