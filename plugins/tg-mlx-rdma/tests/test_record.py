"""Record helper and big-endian helpers, checked against ctypes structures and struct.pack."""
from __future__ import annotations

import ctypes
import struct
import sys

import pytest
from tg_mlx_rdma import Field, Record, be_bytes, from_be16, from_be32, from_be64, to_be16, to_be32, to_be64

# ---------------------------------------------------------------------------------------------- endian

@pytest.mark.parametrize(("fn", "back", "fmt", "value"), [
    (to_be16, from_be16, "H", 0x1234), (to_be32, from_be32, "I", 0x12345678),
    (to_be64, from_be64, "Q", 0x0102030405060708), (to_be32, from_be32, "I", 0xFFFFFFFF), (to_be32, from_be32, "I", 0),
])
def test_to_be_writes_big_endian_bytes_through_host_order(fn, back, fmt, value) -> None:
    host = fn(value)
    assert struct.pack("=" + fmt, host) == struct.pack(">" + fmt, value)  # what a device reads from memory
    assert back(host) == value
    assert back(int.from_bytes(struct.pack(">" + fmt, value), sys.byteorder)) == value


def test_to_be_two_complement_and_range() -> None:
    assert to_be32(-1) == 0xFFFFFFFF
    assert be_bytes(-2, 2) == b"\xff\xfe"
    assert be_bytes(0x0A0B, 4) == b"\x00\x00\x0a\x0b"
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        to_be32(1 << 32)
    with pytest.raises(ValueError):
        to_be16(-(1 << 15) - 1)
    with pytest.raises(TypeError):
        to_be32(1.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- records

class Host(Record):
    """A little-endian layout with a ctypes twin (x86 GCC/ctypes put the first bit field at the LSB)."""
    SIZE = 40
    FIELDS = (
        Field("a", 0, "u8"), Field("b", 1, "s8"), Field("c", 2, "u16"), Field("d", 4, "s32"),
        Field("lo", 8, "u32", bit=0, width=5), Field("mid", 8, "u32", bit=5, width=11),
        Field("neg", 8, "s32", bit=16, width=4),
        Field("arr", 12, "u16", count=4), Field("p", 24, "ptr"), Field("big", 32, "s64"),
    )


class HostC(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint8), ("b", ctypes.c_int8), ("c", ctypes.c_uint16), ("d", ctypes.c_int32),
                ("lo", ctypes.c_uint32, 5), ("mid", ctypes.c_uint32, 11), ("neg", ctypes.c_int32, 4),
                ("arr", ctypes.c_uint16 * 4), ("p", ctypes.c_void_p), ("big", ctypes.c_int64)]


def test_layout_matches_ctypes_byte_for_byte() -> None:
    assert ctypes.sizeof(HostC) == Host.SIZE
    values = dict(a=200, b=-5, c=0xBEEF, d=-123456, lo=17, mid=1500, neg=-3, p=0xDEADBEEF000, big=-(1 << 40))
    r, c = Host(**values, arr=(1, 2, 3, 4)), HostC(**values)
    c.arr = (ctypes.c_uint16 * 4)(1, 2, 3, 4)
    assert bytes(r) == bytes(c)
    back = Host(bytes(c))
    assert {k: getattr(back, k) for k in values} == values
    assert back.arr == [1, 2, 3, 4]


@pytest.mark.parametrize(("field", "written", "read", "ctype"), [
    ("a", -1, 255, ctypes.c_uint8), ("a", 256 + 7, 7, ctypes.c_uint8), ("b", 200, -56, ctypes.c_int8),
    ("b", -128, -128, ctypes.c_int8), ("c", -1, 0xFFFF, ctypes.c_uint16), ("d", 1 << 31, -(1 << 31), ctypes.c_int32),
    ("big", (1 << 64) - 1, -1, ctypes.c_int64),
])
def test_signed_read_back_signed_unsigned_wrap(field, written, read, ctype) -> None:
    r = Host()
    setattr(r, field, written)
    assert getattr(r, field) == read == ctype(written).value  # as C would


def test_bit_fields_wrap_to_their_width_and_keep_neighbours() -> None:
    r = HostC(lo=31, mid=2047, neg=7)
    rec = Host(bytes(r))
    rec.mid = 2048 + 5  # wraps to 5, lo and neg untouched
    rec.neg = -8
    c = HostC.from_buffer_copy(bytes(rec))
    assert (rec.lo, rec.mid, rec.neg) == (c.lo, c.mid, c.neg) == (31, 5, -8)


def test_arrays_from_tuples_lists_and_ctypes_arrays() -> None:
    r = Host()
    r.arr = (5, 6)  # shorter initialiser: the rest is zeroed, as in C
    assert r.arr.tolist() == [5, 6, 0, 0]
    r.arr = (ctypes.c_uint16 * 4)(9, 8, 7, 0xFFFF)
    assert list(r.arr) == [9, 8, 7, 0xFFFF]
    r.arr[1] = -1
    assert r.arr[1] == 0xFFFF and r.arr[-1] == 0xFFFF and len(r.arr) == 4
    with pytest.raises(ValueError, match="holds 4 elements"):
        r.arr = [1, 2, 3, 4, 5]
    with pytest.raises(IndexError):
        r.arr[4] = 0
    with pytest.raises(TypeError):
        r.arr = 3


def test_pointer_fields_take_and_give_none() -> None:
    r = Host()
    assert r.p is None
    target = (ctypes.c_uint8 * 8)()
    r.p = target
    assert r.p == ctypes.addressof(target)
    r.p = ctypes.pointer(ctypes.c_int(3))
    assert isinstance(r.p, int) and r.p != 0
    r.p = None
    assert r.p is None and bytes(r)[24:32] == b"\0" * 8
    with pytest.raises(TypeError):
        r.p = "0x10"


def test_maps_a_buffer_in_place() -> None:
    mem = bytearray(64)
    r = Host(mem, offset=8)
    r.d = 0x01020304
    assert mem[12:16] == (0x01020304).to_bytes(4, "little")
    with pytest.raises(ValueError, match="needs 40 bytes at offset 30"):
        Host(mem, offset=30)


def test_bad_layouts_are_refused() -> None:
    with pytest.raises(ValueError, match="overlaps field x"):
        type("Bad", (Record,), {"SIZE": 8, "FIELDS": (Field("x", 0, "u32"), Field("y", 2, "u16"))})
    with pytest.raises(ValueError, match="past SIZE"):
        type("Bad", (Record,), {"SIZE": 4, "FIELDS": (Field("x", 2, "u32"),)})
    with pytest.raises(ValueError, match="do not fit"):
        Field("x", 0, "u8", bit=4, width=5)
    with pytest.raises(AttributeError):
        Host(nope=1)


# ---------------------------------------------------------------------------------------------- big-endian PRM layouts

class Cqe(Record):
    """The tail of a 64-byte mlx5 CQE (mlx5dv.h ``struct mlx5_cqe64``): big-endian fields."""
    SIZE, ENDIAN = 64, "big"
    FIELDS = (
        Field("byte_cnt", 44, "u32"),
        Field("qpn", 56, "u32", bit=0, width=24), Field("sop_drop", 56, "u32", bit=24, width=8),
        Field("wqe_counter", 60, "u16"), Field("signature", 62, "u8"),
        Field("opcode", 63, "u8", bit=4, width=4), Field("owner", 63, "u8", bit=0, width=1),
    )


def test_big_endian_record_matches_struct_pack() -> None:
    cqe = Cqe(byte_cnt=0x00100000, qpn=0xABCDE, sop_drop=0x12, wqe_counter=0xFFFE, opcode=0x0, owner=1)
    want = bytearray(64)
    struct.pack_into(">I", want, 44, 0x00100000)
    struct.pack_into(">I", want, 56, (0x12 << 24) | 0xABCDE)
    struct.pack_into(">HBB", want, 60, 0xFFFE, 0, (0x0 << 4) | 1)
    assert bytes(cqe) == bytes(want)
    back = Cqe(bytes(want))
    got = (back.byte_cnt, back.qpn, back.sop_drop, back.wqe_counter, back.owner)
    assert got == (0x100000, 0xABCDE, 0x12, 0xFFFE, 1)
    back.opcode = 0xD  # an error CQE: the owner bit next to it stays
    assert bytes(back)[63] == 0xD1


def test_ifc_bit_offsets_place_fields_like_mlx5_ifc() -> None:
    """mlx5_ifc.h counts bits from the struct start, most significant first, in big-endian dwords."""
    class Cmd(Record):
        SIZE, ENDIAN = 24, "big"
        FIELDS = (Field.ifc("opcode", 0x00, 0x10), Field.ifc("uid", 0x10, 0x10), Field.ifc("op_mod", 0x30, 0x10),
                  Field.ifc("flag", 0x40, 1), Field.ifc("qpn", 0x48, 0x18), Field.ifc("addr", 0x80, 0x40))
    cmd = Cmd(opcode=0x500, op_mod=3, flag=1, qpn=0x123456, addr=0x1122334455667788)
    want = struct.pack(">HHHHI", 0x500, 0, 0, 3, (1 << 31) | 0x123456) + bytes(4)
    want += struct.pack(">Q", 0x1122334455667788)
    assert bytes(cmd) == want
    assert Cmd.qpn == Field("qpn", 8, "u32", bit=0, width=24)
    with pytest.raises(ValueError, match="cross a dword"):
        Field.ifc("x", 0x1C, 8)
