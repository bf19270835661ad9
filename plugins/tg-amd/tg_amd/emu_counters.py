"""Counts the emulator can make exactly: instructions by class, LDS bank conflicts under a stated model, waits.

In: the mnemonics a launch executed (``RunStats.by_name``), each LDS access's lane addresses (``EmuCounts.lds``,
called by the DS ops when they issue) and each ``s_waitcnt``/``s_wait_*`` (``EmuCounts.wait``).
Out: ``instruction_classes(by_name)`` and the fields of ``EmuCounts``, copied into ``RunStats`` after a launch.

Instruction classes, by mnemonic: WMMA (``v_wmma_*``, ``v_swmmac_*``), VALU (other ``v_*``, VOPD pairs
included), LDS (``ds_*``), global memory (``global_*``, ``buffer_*``, ``tbuffer_*``, ``flat_*``, ``scratch_*``),
scalar memory (``s_load_*``, ``s_buffer_load_*``, ``s_prefetch_*``), wait (``s_waitcnt*``, ``s_wait_*``), branch
(``s_branch``, ``s_cbranch_*``, ``s_setpc``/``s_swappc``/``s_getpc``), other (``s_nop``, ``s_endpgm``,
``s_barrier*``, ``s_delay_alu``, ``s_sleep``, …) and SALU (every other ``s_*``).

The LDS model (the facts per target are in ``LDS_MODELS``): LDS is ``banks`` banks of ``bank_bytes`` bytes, a dword
address ``a`` lives in bank ``a % banks``. A wave32 access is served in passes over consecutive lanes, as many lanes
per pass as fit the banks once: all 32 lanes for 32-bit and narrower accesses, two halves of 16 lanes for 64-bit,
four quarters of 8 for 128-bit (96-bit as 128). Within a pass, lanes reading the same dword share it (broadcast);
a bank asked for k different dwords takes k cycles. Bank conflicts = the cycles beyond one per pass, summed over the
passes (inactive lanes ask for nothing). A ``_2addr`` instruction is two accesses.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

WAVE = 32


@dataclass(frozen=True)
class LdsModel:
    banks: int
    bank_bytes: int


# RDNA3 and RDNA4 LDS as the model above: 32 dword-wide banks per access pass
LDS_MODELS = {"rdna3": LdsModel(32, 4), "rdna4": LdsModel(32, 4)}

_BRANCHES = ("s_branch", "s_cbranch_", "s_setpc", "s_swappc", "s_getpc")
_OTHER = ("s_nop", "s_endpgm", "s_code_end", "s_barrier", "s_delay_alu", "s_sleep", "s_sethalt", "s_trap",
          "s_sendmsg", "s_clause", "s_set_inst_prefetch", "s_icache_inv", "s_ttrace", "s_wakeup")
_GLOBAL = ("global_", "buffer_", "tbuffer_", "flat_", "scratch_")
_SMEM = ("s_load_", "s_buffer_load_", "s_prefetch_", "s_buffer_prefetch_", "s_dcache", "s_gl1_inv")
CLASSES = ("VALU", "WMMA", "SALU", "LDS", "global memory", "scalar memory", "branch", "wait", "other")


def instruction_class(name: str) -> str:
    """The class of an executed mnemonic (a VOPD pair ``a :: b`` is one VALU instruction)."""
    if name.startswith(("v_wmma_", "v_swmmac_")):
        return "WMMA"
    if name.startswith("v_"):
        return "VALU"
    if name.startswith("ds_"):
        return "LDS"
    if name.startswith(_GLOBAL):
        return "global memory"
    if name.startswith(_SMEM):
        return "scalar memory"
    if name.startswith(("s_waitcnt", "s_wait_")):
        return "wait"
    if name.startswith(_BRANCHES):
        return "branch"
    if name.startswith(_OTHER):
        return "other"
    return "SALU"


def instruction_classes(by_name: Counter[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for name, n in by_name.items():
        out[instruction_class(name)] += n
    return out


def bank_conflicts(addresses: np.ndarray, lanes: np.ndarray, nbytes: int, model: LdsModel) -> int:
    """Extra cycles of one LDS access: ``addresses`` (bytes) of the active ``lanes`` (lane numbers), ``nbytes`` each.
    See the module docstring for the model."""
    if len(addresses) == 0:
        return 0
    words_per_lane = max(1, -(-nbytes // model.bank_bytes))
    per_pass = max(1, model.banks // (4 if words_per_lane == 3 else words_per_lane))
    first = np.asarray(addresses, dtype=np.int64) // model.bank_bytes
    words = (first[:, None] + np.arange(words_per_lane)).ravel()
    passes = np.repeat(np.asarray(lanes, dtype=np.int64) // per_pass, words_per_lane)
    distinct = np.unique(passes << 40 | words)          # each dword once per pass (broadcast)
    pass_of, bank_of = distinct >> 40, (distinct & ((1 << 40) - 1)) % model.banks
    keys, cycles = np.unique(pass_of * model.banks + bank_of, return_counts=True)
    worst = np.zeros(WAVE, dtype=np.int64)              # per pass: its busiest bank's cycles
    np.maximum.at(worst, keys // model.banks, cycles)
    return int((worst[worst > 0] - 1).sum())


class EmuCounts:
    """Counts of the current launch that the ops make as they run (reset per launch)."""

    __slots__ = ("lds_accesses", "lds_bank_conflicts", "waits", "waits_that_waited", "model")

    def __init__(self, model: LdsModel) -> None:
        self.model = model
        self.reset()

    def reset(self) -> None:
        self.lds_accesses = 0
        self.lds_bank_conflicts = 0
        self.waits = 0
        self.waits_that_waited = 0

    def lds(self, addresses: np.ndarray, lanes: np.ndarray, nbytes: int) -> None:
        self.lds_accesses += 1
        self.lds_bank_conflicts += bank_conflicts(addresses, lanes, nbytes, self.model)

    def wait(self, completed: int) -> None:
        """One executed wait instruction that had to complete ``completed`` operations first."""
        self.waits += 1
        self.waits_that_waited += completed > 0
