"""Hand-written machine-code kernels (``gemm``: WMMA GEMMs for RDNA3 and RDNA4)."""
