"""Encoding formats as data: where each field sits in an instruction word, per architecture.

``LAYOUTS[gen][format]`` is a ``Layout``: size in bits (without a trailing literal), the fixed
encoding bits at the top of the first dword, and ``{field: (low bit, width)}``. ``pack`` turns
field values into an integer, ``unpack`` the reverse; ``match`` finds the format of a first dword.
Sources: the RDNA3, RDNA4 and CDNA3 ISA reference guides (microcode formats chapter).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    name: str
    bits: int
    enc_lo: int                # fixed encoding bits occupy [31:enc_lo] of the first dword
    enc: int
    fields: dict[str, tuple[int, int]]

    def pack(self, values: dict[str, int]) -> int:
        word = self.enc << self.enc_lo
        for name, value in values.items():
            lo, width = self.fields[name]
            if value < 0 or value >= 1 << width:
                raise ValueError(f"field {name} of {self.name} is {width} bits, got {value}")
            word |= value << lo
        return word

    def unpack(self, word: int) -> dict[str, int]:
        return {name: (word >> lo) & ((1 << width) - 1) for name, (lo, width) in self.fields.items()}

    def matches(self, dword0: int) -> bool:
        return dword0 >> self.enc_lo == self.enc


def _layout(name: str, bits: int, enc: str, fields: dict[str, tuple[int, int]]) -> Layout:
    return Layout(name, bits, 32 - len(enc), int(enc, 2), fields)


VSRC3 = {"src0": (32, 9), "src1": (41, 9), "src2": (50, 9)}
SALU = {
    "SOP1": _layout("SOP1", 32, "101111101", {"sdst": (16, 7), "op": (8, 8), "ssrc0": (0, 8)}),
    "SOPC": _layout("SOPC", 32, "101111110", {"op": (16, 7), "ssrc1": (8, 8), "ssrc0": (0, 8)}),
    "SOPP": _layout("SOPP", 32, "101111111", {"op": (16, 7), "simm16": (0, 16)}),
    "SOPK": _layout("SOPK", 32, "1011", {"op": (23, 5), "sdst": (16, 7), "simm16": (0, 16)}),
    "SOP2": _layout("SOP2", 32, "10", {"op": (23, 7), "sdst": (16, 7), "ssrc1": (8, 8), "ssrc0": (0, 8)}),
}
VALU = {
    "VOP1": _layout("VOP1", 32, "0111111", {"vdst": (17, 8), "op": (9, 8), "src0": (0, 9)}),
    "VOPC": _layout("VOPC", 32, "0111110", {"op": (17, 8), "vsrc1": (9, 8), "src0": (0, 9)}),
    "VOP2": _layout("VOP2", 32, "0", {"op": (25, 6), "vdst": (17, 8), "vsrc1": (9, 8), "src0": (0, 9)}),
}
RDNA = {
    **SALU, **VALU,
    "SMEM": _layout("SMEM", 64, "111101", {"op": (18, 8), "glc": (14, 1), "dlc": (13, 1), "sdata": (6, 7),
                                           "sbase": (0, 6), "offset": (32, 21), "soffset": (57, 7)}),
    "VOP3": _layout("VOP3", 64, "110101", {"op": (16, 10), "clamp": (15, 1), "op_sel": (11, 4), "abs": (8, 3),
                                           "vdst": (0, 8), **VSRC3, "omod": (59, 2), "neg": (61, 3)}),
    "VOP3SD": _layout("VOP3SD", 64, "110101", {"op": (16, 10), "clamp": (15, 1), "sdst": (8, 7), "vdst": (0, 8),
                                               **VSRC3, "omod": (59, 2), "neg": (61, 3)}),
    "VOP3P": _layout("VOP3P", 64, "11001100", {"op": (16, 7), "clamp": (15, 1), "op_sel_hi2": (14, 1),
                                               "op_sel": (11, 3), "neg_hi": (8, 3), "vdst": (0, 8), **VSRC3,
                                               "op_sel_hi": (59, 2), "neg": (61, 3)}),
    "VOPD": _layout("VOPD", 64, "110010", {"opx": (22, 4), "opy": (17, 5), "vsrcx1": (9, 8), "srcx0": (0, 9),
                                           "srcy0": (32, 9), "vsrcy1": (41, 8), "vdsty": (49, 7), "vdstx": (56, 8)}),
    "DS": _layout("DS", 64, "110110", {"op": (18, 8), "gds": (17, 1), "offset1": (8, 8), "offset0": (0, 8),
                                       "addr": (32, 8), "data0": (40, 8), "data1": (48, 8), "vdst": (56, 8)}),
    "FLAT": _layout("FLAT", 64, "110111", {"op": (18, 7), "seg": (16, 2), "slc": (15, 1), "glc": (14, 1),
                                           "dlc": (13, 1), "offset": (0, 13), "addr": (32, 8), "data": (40, 8),
                                           "saddr": (48, 7), "sve": (55, 1), "vdst": (56, 8)}),
    "MUBUF": _layout("MUBUF", 64, "111000", {"op": (18, 8), "glc": (14, 1), "dlc": (13, 1), "slc": (12, 1),
                                             "offset": (0, 12), "vaddr": (32, 8), "vdata": (40, 8), "srsrc": (48, 5),
                                             "tfe": (53, 1), "offen": (54, 1), "idxen": (55, 1), "soffset": (56, 8)}),
    "MTBUF": _layout("MTBUF", 64, "111010", {"format": (19, 7), "op": (15, 4), "glc": (14, 1), "dlc": (13, 1),
                                             "slc": (12, 1), "offset": (0, 12), "vaddr": (32, 8), "vdata": (40, 8),
                                             "srsrc": (48, 5), "tfe": (53, 1), "offen": (54, 1), "idxen": (55, 1),
                                             "soffset": (56, 8)}),
    "EXP": _layout("EXP", 64, "111110", {"en": (0, 4), "target": (4, 6), "done": (11, 1), "row_en": (13, 1),
                                         "vsrc0": (32, 8), "vsrc1": (40, 8), "vsrc2": (48, 8), "vsrc3": (56, 8)}),
    "VINTERP": _layout("VINTERP", 64, "11001101", {"vdst": (0, 8), "wait_exp": (8, 3), "op_sel": (11, 4),
                                                   "clamp": (15, 1), "op": (16, 7), **VSRC3, "neg": (61, 3)}),
    "LDSDIR": _layout("LDSDIR", 32, "11001110", {"vdst": (0, 8), "chan": (8, 2), "attr": (10, 6),
                                                 "wait_vdst": (16, 4), "op": (20, 2), "wait_vm_vsrc": (23, 1)}),
    # image_*: a second dword of NSA addresses (vaddr1..4, a byte each) follows when nsa is set
    "MIMG": _layout("MIMG", 64, "111100", {"nsa": (0, 1), "dim": (2, 3), "unorm": (7, 1), "dmask": (8, 4),
                                           "slc": (12, 1), "dlc": (13, 1), "glc": (14, 1), "r128": (15, 1),
                                           "a16": (16, 1), "d16": (17, 1), "op": (18, 8), "vaddr": (32, 8),
                                           "vdata": (40, 8), "srsrc": (48, 5), "tfe": (53, 1), "lwe": (54, 1),
                                           "ssamp": (58, 5)}),
}
IMAGE_ADDRESSES = {"vaddr0": (64, 8), "vaddr1": (72, 8), "vaddr2": (80, 8), "vaddr3": (88, 8)}
RDNA4 = {
    **{name: lay for name, lay in RDNA.items() if name != "MIMG"},
    "VIMAGE": _layout("VIMAGE", 96, "110100", {"dim": (0, 3), "r128": (4, 1), "d16": (5, 1), "a16": (6, 1),
                                               "op": (14, 8), "dmask": (22, 4), "vdata": (32, 8), "srsrc": (41, 9),
                                               "scope": (50, 2), "th": (52, 3), "tfe": (55, 1), "vaddr4": (56, 8),
                                               **IMAGE_ADDRESSES}),
    "VSAMPLE": _layout("VSAMPLE", 96, "111001", {"dim": (0, 3), "tfe": (3, 1), "r128": (4, 1), "d16": (5, 1),
                                                 "a16": (6, 1), "unorm": (13, 1), "op": (14, 8), "dmask": (22, 4),
                                                 "vdata": (32, 8), "lwe": (40, 1), "srsrc": (41, 9), "scope": (50, 2),
                                                 "th": (52, 3), "ssamp": (55, 9), **IMAGE_ADDRESSES}),
    "SMEM": _layout("SMEM", 64, "111101", {"op": (13, 8), "sdata": (6, 7), "sbase": (0, 6),
                                           "offset": (32, 24), "soffset": (57, 7)}),
    "DS": _layout("DS", 64, "110110", {"op": (18, 8), "offset1": (8, 8), "offset0": (0, 8),
                                       "addr": (32, 8), "data0": (40, 8), "data1": (48, 8), "vdst": (56, 8)}),
    # VFLAT / VGLOBAL / VSCRATCH share one 96-bit layout; seg picks the address space
    "FLAT": _layout("FLAT", 96, "111011", {"seg": (24, 2), "op": (14, 8), "saddr": (0, 7), "vdst": (32, 8),
                                           "sve": (49, 1), "scope": (50, 2), "th": (52, 3), "vdata": (55, 8),
                                           "vaddr": (64, 8),
                                           "offset": (72, 24)}),
    "MUBUF": _layout("VBUFFER", 96, "110001", {"op": (14, 8), "tfe": (22, 1), "soffset": (0, 7), "vdata": (32, 8),
                                               "srsrc": (41, 9), "scope": (50, 2), "th": (52, 3), "format": (55, 7),
                                               "offen": (62, 1), "idxen": (63, 1), "vaddr": (64, 8),
                                               "offset": (72, 24)}),
}
CDNA = {
    **SALU, **VALU,
    "SMEM": _layout("SMEM", 64, "110000", {"op": (18, 8), "imm": (17, 1), "glc": (16, 1), "nv": (15, 1),
                                           "soe": (14, 1), "sdata": (6, 7), "sbase": (0, 6), "offset": (32, 21),
                                           "soffset": (57, 7)}),
    "VOP3": _layout("VOP3", 64, "110100", {"op": (16, 10), "clamp": (15, 1), "op_sel": (11, 4), "abs": (8, 3),
                                           "vdst": (0, 8), **VSRC3, "omod": (59, 2), "neg": (61, 3)}),
    "VOP3SD": _layout("VOP3SD", 64, "110100", {"op": (16, 10), "clamp": (15, 1), "sdst": (8, 7), "vdst": (0, 8),
                                               **VSRC3, "omod": (59, 2), "neg": (61, 3)}),
    "VOP3P": _layout("VOP3P", 64, "110100111", {"op": (16, 7), "clamp": (15, 1), "op_sel_hi2": (14, 1),
                                                "op_sel": (11, 3), "neg_hi": (8, 3), "vdst": (0, 8), **VSRC3,
                                                "op_sel_hi": (59, 2), "neg": (61, 3)}),
    # matrix core (MFMA): same encoding bits as VOP3P, other meanings of the modifier bits
    "MAI": _layout("MAI", 64, "110100111", {"op": (16, 7), "acc_cd": (15, 1), "abid": (11, 4), "cbsz": (8, 3),
                                            "vdst": (0, 8), **VSRC3, "acc": (59, 2), "blgp": (61, 3)}),
    "DS": _layout("DS", 64, "110110", {"acc": (25, 1), "op": (17, 8), "gds": (16, 1), "offset1": (8, 8),
                                       "offset0": (0, 8), "addr": (32, 8), "data0": (40, 8), "data1": (48, 8),
                                       "vdst": (56, 8)}),
    "MUBUF": _layout("MUBUF", 64, "111000", {"op": (18, 7), "nt": (17, 1), "lds": (16, 1), "sc1": (15, 1),
                                             "sc0": (14, 1), "idxen": (13, 1), "offen": (12, 1), "offset": (0, 12),
                                             "vaddr": (32, 8), "vdata": (40, 8), "srsrc": (48, 5), "acc": (55, 1),
                                             "soffset": (56, 8)}),
    "MTBUF": _layout("MTBUF", 64, "111010", {"format": (19, 7), "op": (15, 4), "sc0": (14, 1), "idxen": (13, 1),
                                             "offen": (12, 1), "offset": (0, 12), "vaddr": (32, 8), "vdata": (40, 8),
                                             "srsrc": (48, 5), "sc1": (53, 1), "nt": (54, 1), "acc": (55, 1),
                                             "soffset": (56, 8)}),
    "FLAT": _layout("FLAT", 64, "110111", {"sc1": (25, 1), "op": (18, 7), "nt": (17, 1), "sc0": (16, 1),
                                           "seg": (14, 2), "sve": (13, 1), "offset": (0, 13), "addr": (32, 8),
                                           "data": (40, 8),
                                           "saddr": (48, 7), "acc": (55, 1), "vdst": (56, 8)}),
}
LAYOUTS: dict[int, dict[str, Layout]] = {11: RDNA, 12: RDNA4, 9: CDNA}


def match(gen: int, dword0: int) -> list[Layout]:
    """Layouts whose fixed bits match ``dword0``, longest encoding first (SOP1 before SOPK before SOP2)."""
    found = [lay for lay in LAYOUTS[gen].values() if lay.matches(dword0)]
    return sorted(found, key=lambda lay: lay.enc_lo)
