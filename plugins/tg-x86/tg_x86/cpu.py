"""Can this machine run our code? The x86 backend's view of the core's CPU probe.

In: the host, through ``tgcore.runtime.cpufeatures.cpu_features()`` (CPUID and XGETBV with the OS checks, or
/proc/cpuinfo). Out: ``features()`` (the feature names the CPU and OS support), ``REQUIRED`` (what our code uses:
AVX, AVX2, FMA, F16C) and ``unavailable_reason()`` (``None`` when the backend can run here, else why not), the
renderer's availability probe.
"""
from __future__ import annotations

import functools

from tgcore.runtime.cpufeatures import CPUFeatures, cpu_features

REQUIRED = ("avx", "avx2", "fma", "f16c")


def is_x86_64() -> bool:
    return cpu_features().is_x86_64


def features() -> frozenset[str]:
    return cpu_features().features


def reason(cpu: CPUFeatures) -> str | None:
    """Why the backend cannot run on ``cpu``, or None."""
    if not cpu.is_x86_64:
        return f"not an x86-64 machine ({cpu.arch or 'unknown'})"
    missing = [f.upper() for f in REQUIRED if f not in cpu.features]
    if missing:
        return f"the CPU lacks {', '.join(missing)}"
    return None


@functools.cache
def unavailable_reason() -> str | None:
    """``None`` if the x86 backend can run here, else the reason (for ``tg devices``). Never raises."""
    try:
        return reason(cpu_features())
    except Exception as e:  # a probe must not take the host down
        return f"CPU feature detection failed: {e}"
