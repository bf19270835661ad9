"""DPP: data-parallel lane movement of a VALU instruction's first source (``quad_perm:[1,0,3,2]``,
``row_shl:1``, ``row_share:3``, ``dpp8:[7,6,5,4,3,2,1,0]``, ``row_bcast:15``, ...).

In: the modifiers of an instruction (``Inst.mods``), the VGPR number of src0 and its neg/abs bits.
Out: the src0 code that announces DPP (0xFA, or 0xE9/0xEA for DPP8) and the extra dword after the
instruction -- ``encode``; ``decode`` is the reverse. Control values and the DPP dword layout
(src0 [7:0], dpp_ctrl [16:8], fi [18], bound_ctrl [19], neg/abs of src0/src1 [23:20],
bank_mask [27:24], row_mask [31:28]; DPP8: eight 3-bit lane selects [31:8]) as in the RDNA and
CDNA ISA guides and llvm-mc's encodings.
"""
from __future__ import annotations

from typing import Any, NoReturn

from tg_amd.arch import Arch, AsmError

DPP16, DPP8, DPP8_FI = 0xFA, 0xE9, 0xEA
# name -> (first control value, allowed arguments, families that have it)
SHIFTS: dict[str, tuple[int, range, tuple[str, ...]]] = {
    "row_shl": (0x100, range(1, 16), ("rdna3", "rdna4", "cdna3")),
    "row_shr": (0x110, range(1, 16), ("rdna3", "rdna4", "cdna3")),
    "row_ror": (0x120, range(1, 16), ("rdna3", "rdna4", "cdna3")),
    "wave_shl": (0x12F, range(1, 2), ("cdna3",)),
    "wave_rol": (0x133, range(1, 2), ("cdna3",)),
    "wave_shr": (0x137, range(1, 2), ("cdna3",)),
    "wave_ror": (0x13B, range(1, 2), ("cdna3",)),
    "row_share": (0x150, range(0, 16), ("rdna3", "rdna4")),
    "row_xmask": (0x160, range(0, 16), ("rdna3", "rdna4")),
}
FLAGS = {"row_mirror": 0x140, "row_half_mirror": 0x141}
BCAST = {15: 0x142, 31: 0x143}  # row_bcast (CDNA)
CONTROLS = ("quad_perm", *SHIFTS, *FLAGS, "row_bcast")
KEYS = (*CONTROLS, "dpp8", "row_mask", "bank_mask", "bound_ctrl", "fi")


def has_dpp(mods: dict[str, Any]) -> bool:
    return any(k in mods for k in KEYS)


def _fail(message: str, arch: Arch, what: str = "dpp") -> NoReturn:
    raise AsmError(message, None, what, arch.name)


def _control(mods: dict[str, Any], arch: Arch) -> int:
    given = [k for k in CONTROLS if k in mods]
    if len(given) > 1:
        _fail(f"one DPP control at a time, got {', '.join(given)}", arch)
    if not given:
        return 0xE4  # quad_perm:[0,1,2,3], the identity
    key = given[0]
    value = mods[key]
    if key == "quad_perm":
        if len(value) != 4 or any(not 0 <= x <= 3 for x in value):
            _fail("quad_perm takes four lanes 0..3", arch, key)
        return sum(x << (2 * i) for i, x in enumerate(value))
    if key in FLAGS:
        return FLAGS[key]
    if key == "row_bcast":
        if arch.rdna or value not in BCAST:
            _fail("row_bcast is 15 or 31, on gfx9 only", arch, key)
        return BCAST[value]
    base, allowed, families = SHIFTS[key]
    if arch.family not in families:
        _fail(f"{key} does not exist on this arch", arch, key)
    if value not in allowed:
        _fail(f"{key} takes {allowed.start}..{allowed.stop - 1}", arch, key)
    return base + value


def _bit(mods: dict[str, Any], key: str, arch: Arch) -> int:
    value = mods.get(key, 0)
    if value is True:
        value = 1
    if key == "bound_ctrl" and not arch.rdna and value == 0 and key in mods:
        value = 1  # gfx9: llvm-mc reads bound_ctrl:0 as bound_ctrl:1
    if value not in (0, 1):
        _fail(f"{key} is 0 or 1", arch, key)
    if key == "bound_ctrl" and arch.rdna and key in mods and value == 0:
        _fail("bound_ctrl:0 is not valid on this arch (use bound_ctrl:1)", arch, key)
    return int(value)


def encode(mods: dict[str, Any], src0: int, negabs: int, arch: Arch) -> tuple[int, int]:
    """(src0 code, DPP dword). ``negabs``: bits neg0, abs0, neg1, abs1."""
    if "dpp8" in mods:
        if not arch.rdna:
            _fail("dpp8 exists on RDNA only", arch, "dpp8")
        lanes = mods["dpp8"]
        extra = [k for k in KEYS if k in mods and k not in ("dpp8", "fi")]
        if len(lanes) != 8 or any(not 0 <= x <= 7 for x in lanes) or extra:
            _fail("dpp8 takes eight lanes 0..7 (and fi:1, nothing else)", arch, "dpp8")
        if negabs:
            _fail("dpp8 takes no neg/abs modifiers", arch, "dpp8")
        return (DPP8_FI if _bit(mods, "fi", arch) else DPP8), src0 | sum(x << (8 + 3 * i) for i, x in enumerate(lanes))
    if "fi" in mods and not arch.rdna:
        _fail("fi exists on RDNA only", arch, "fi")
    row_mask, bank_mask = mods.get("row_mask", 0xF), mods.get("bank_mask", 0xF)
    for key, v in (("row_mask", row_mask), ("bank_mask", bank_mask)):
        if not isinstance(v, int) or not 0 <= v <= 15:
            _fail(f"{key} is 0..0xf", arch, key)
    word = (src0 | _control(mods, arch) << 8 | _bit(mods, "fi", arch) << 18 | _bit(mods, "bound_ctrl", arch) << 19
            | negabs << 20 | bank_mask << 24 | row_mask << 28)
    return DPP16, word


def decode(code: int, word: int, arch: Arch) -> tuple[int, int, dict[str, Any]]:
    """(src0 VGPR, neg/abs bits, modifiers) of a DPP dword announced by src0 ``code``."""
    src0 = word & 0xFF
    if code in (DPP8, DPP8_FI):
        mods: dict[str, Any] = {"dpp8": tuple(word >> (8 + 3 * i) & 7 for i in range(8))}
        if code == DPP8_FI:
            mods["fi"] = 1
        return src0, 0, mods
    ctrl = word >> 8 & 0x1FF
    mods = {}
    if ctrl <= 0xFF:
        mods["quad_perm"] = tuple(ctrl >> (2 * i) & 3 for i in range(4))
    elif ctrl in FLAGS.values():
        mods[next(k for k, v in FLAGS.items() if v == ctrl)] = True
    elif ctrl in BCAST.values() and not arch.rdna:
        mods["row_bcast"] = next(k for k, v in BCAST.items() if v == ctrl)
    else:
        for key, (base, allowed, families) in SHIFTS.items():
            if arch.family in families and ctrl - base in allowed:
                mods[key] = ctrl - base
                break
        else:
            raise AsmError(f"unknown DPP control {ctrl:#x}", None, "dpp", arch.name)
    mods["row_mask"] = word >> 28 & 15
    mods["bank_mask"] = word >> 24 & 15
    if word >> 19 & 1:
        mods["bound_ctrl"] = 1
    if word >> 18 & 1 and arch.rdna:
        mods["fi"] = 1
    return src0, word >> 20 & 15, mods
