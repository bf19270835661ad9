"""Opcode tables as data: ``rdna`` (RDNA3 gfx11 and RDNA4 gfx12) and ``cdna`` (CDNA3 gfx942)."""
