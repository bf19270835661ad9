"""Malformed files: each raises GGUFError naming the byte offset and the reason."""
from __future__ import annotations

import struct

import pytest
import tg_gguf
from tg_gguf import GGMLType, GGUFError
from tg_gguf import GGUFValueType as V
from tg_gguf_testutil import Builder, small_builder, write

FIRST_KV = 24  # magic, version, tensor count, kv count


def expect_error(data: bytes, offset: int | None, *reason: str) -> GGUFError:
    with pytest.raises(GGUFError) as exc:
        tg_gguf.from_bytes(data)
    e = exc.value
    assert isinstance(e, ValueError)
    if offset is not None:
        assert e.offset == offset, str(e)
    assert f"at byte {e.offset}:" in str(e)
    for r in reason:
        assert r in str(e), str(e)
    return e


def info_offset(data: bytes, name: str) -> int:
    """Where the tensor info of ``name`` starts (its name's length field)."""
    raw = name.encode()
    return data.index(struct.pack("<Q", len(raw)) + raw)


def one_tensor(**kw) -> Builder:
    b = Builder().add("general.architecture", V.STRING, "llama")
    return b.tensor("w", (32,), GGMLType.F32, **kw)


def test_error_names_file_path_and_is_a_value_error(tmp_path):
    path = write(tmp_path, b"NOPE" + bytes(20))
    with pytest.raises(ValueError, match=r"model\.gguf: invalid GGUF at byte 0: bad magic b'NOPE'"):
        tg_gguf.load(path)


def test_bad_magic():
    expect_error(b"GGML" + bytes(60), 0, "bad magic", "not a GGUF file")


@pytest.mark.parametrize("data", [b"", b"G", b"GGU"])
def test_empty_or_shorter_than_magic(data):
    expect_error(data, 0, "empty" if not data else "truncated")


def test_empty_file_on_disk(tmp_path):
    with pytest.raises(GGUFError, match="byte 0: file is empty"):
        tg_gguf.load(write(tmp_path, b""))


def test_version_1_unsupported():
    expect_error(b"GGUF" + struct.pack("<I", 1) + bytes(32), 4, "version 1 is not supported")


@pytest.mark.parametrize("version", [2, 3])
def test_big_endian_unsupported(version):
    expect_error(b"GGUF" + struct.pack(">I", version) + bytes(32), 4, "big-endian", "not supported")


@pytest.mark.parametrize("version", [0, 4, 99])
def test_unknown_version(version):
    expect_error(b"GGUF" + struct.pack("<I", version) + bytes(32), 4, f"unsupported GGUF version {version}")


def test_truncated_at_every_byte():
    built = small_builder().build().data
    full = tg_gguf.from_bytes(built)
    data_end = max(t.offset + t.nbytes for t in full.tensor_info.values())
    for cut in range(data_end):
        e = expect_error(built[:cut], None)
        assert e.offset <= data_end
        assert any(w in e.reason for w in ("truncated", "past the end", "outside the file", "empty")), e.reason


def test_truncated_header_field():
    data = small_builder().build().data
    expect_error(data[:13], 8, "truncated", "tensor count needs 8 bytes but only 5 are left")


def test_key_length_beyond_file():
    data = bytearray(small_builder().build().data)
    data[FIRST_KV:FIRST_KV + 8] = struct.pack("<Q", 2**64 - 1)
    expect_error(bytes(data), FIRST_KV, "key length 18446744073709551615 runs past the end of the file")


def test_string_value_length_beyond_file():
    b = Builder().add("k", V.STRING, "value")
    data = bytearray(b.build().data)
    at = FIRST_KV + 8 + 1 + 4  # key length, key, value type
    data[at:at + 8] = struct.pack("<Q", 10**12)
    expect_error(bytes(data), at, "string value length 1000000000000 runs past the end")


def test_array_length_beyond_file():
    b = Builder().add("k", V.ARRAY, (V.UINT32, [1, 2, 3]))
    data = bytearray(b.build().data)
    at = FIRST_KV + 8 + 1 + 4 + 4  # key length, key, value type, element type
    data[at:at + 8] = struct.pack("<Q", 2**62)
    expect_error(bytes(data), at, f"array of {2**62} UINT32 values runs past the end")


def test_string_array_length_beyond_file():
    b = Builder().add("k", V.ARRAY, (V.STRING, ["a"]))
    data = bytearray(b.build().data)
    at = FIRST_KV + 8 + 1 + 4 + 4
    data[at:at + 8] = struct.pack("<Q", 2**40)
    expect_error(bytes(data), at, "STRING values runs past the end")


def test_tensor_data_outside_file():
    data = bytearray(one_tensor().build().data)
    at = info_offset(bytes(data), "w") + 8 + 1 + 4 + 8 + 4  # name length, name, n_dims, dims, type
    data[at:at + 8] = struct.pack("<Q", 1 << 20)
    expect_error(bytes(data), info_offset(bytes(data), "w"), "data of tensor 'w'", "lies outside the file")


def test_tensor_data_partly_outside_file():
    data = one_tensor().build().data
    expect_error(data[:-1], info_offset(data, "w"), "lies outside the file")


def test_overlapping_tensors():
    b = one_tensor().tensor("v", (32,), GGMLType.F32, offset=96)
    b.tensors[0].offset = 64  # w covers 64..192, v starts at 96
    data = b.build().data
    expect_error(data, info_offset(data, "v"), "tensor 'v'", "overlaps tensor 'w'")


def test_misaligned_offset():
    data = one_tensor(offset=4).build().data
    at = info_offset(data, "w") + 8 + 1 + 4 + 8 + 4  # name length, name, n_dims, dims, type
    expect_error(data, at, "offset 4 is not a multiple of the alignment 32")


def test_misaligned_with_custom_alignment():
    b = one_tensor(offset=32).add("general.alignment", V.UINT32, 64)
    b.alignment = 64
    data = b.build().data
    expect_error(data, None, "offset 32 is not a multiple of the alignment 64")


def test_dims_product_overflows():
    b = Builder().tensor("w", (2**32, 2**32), GGMLType.F32, data=b"")
    data = b.build().data
    expect_error(data, info_offset(data, "w") + 9, "overflow", "int64")


def test_single_dim_beyond_int64():
    data = Builder().tensor("w", (2**63,), GGMLType.I8, data=b"").build().data
    expect_error(data, info_offset(data, "w") + 9, "overflow")


@pytest.mark.parametrize("type_id", [4, 5, 31, 42, 2**32 - 1])
def test_unknown_tensor_type(type_id):
    b = Builder().tensor("w", (32,), GGMLType.F32)
    b.tensors[0].type = type_id
    data = b.build().data
    at = info_offset(data, "w") + 8 + 1 + 4 + 8
    expect_error(data, at, f"unknown ggml type id {type_id}")


@pytest.mark.parametrize("vtype", [13, 255])
def test_unknown_value_type(vtype):
    data = bytearray(Builder().add("k", V.UINT8, 1).build().data)
    at = FIRST_KV + 8 + 1
    data[at:at + 4] = struct.pack("<I", vtype)
    expect_error(bytes(data), at, f"unknown value type of 'k' {vtype}")


def test_unknown_array_element_type():
    data = bytearray(Builder().add("k", V.ARRAY, (V.UINT8, [1])).build().data)
    at = FIRST_KV + 8 + 1 + 4
    data[at:at + 4] = struct.pack("<I", 99)
    expect_error(bytes(data), at, "unknown array element type 99")


def test_duplicate_tensor_names():
    b = Builder().tensor("w", (32,), GGMLType.F32).tensor("w", (32,), GGMLType.F32)
    data = b.build().data
    second = data.index(b"\x01\x00\x00\x00\x00\x00\x00\x00w", info_offset(data, "w") + 1)
    expect_error(data, second, "duplicate tensor name 'w'")


def test_duplicate_keys():
    data = Builder().add("k", V.UINT8, 1).add("k", V.UINT8, 2).build().data
    expect_error(data, FIRST_KV + 8 + 1 + 4 + 1, "duplicate key 'k'")


def test_absurd_tensor_count():
    b = small_builder()
    b.tensor_count = 2**60
    expect_error(b.build().data, 8, f"tensor count {2**60} is absurd")


def test_absurd_kv_count():
    b = small_builder()
    b.kv_count = 2**64 - 1
    expect_error(b.build().data, 16, f"kv count {2**64 - 1} is absurd")


def test_deeply_nested_arrays_are_capped_not_recursed():
    depth = 100_000
    value = b"".join(struct.pack("<IQ", V.ARRAY, 1) for _ in range(depth))  # element type ARRAY, count 1
    value += struct.pack("<IQ", V.UINT8, 0)
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", V.ARRAY) + value
    e = expect_error(data, None, "nested deeper than 8 levels")
    assert e.offset < 200


def test_nested_arrays_within_the_cap_load():
    nested: tuple = (V.UINT8, [1])
    for _ in range(7):
        nested = (V.ARRAY, [nested])
    gf = tg_gguf.from_bytes(Builder().add("k", V.ARRAY, nested).build().data)
    value = gf.metadata["k"]
    for _ in range(8):
        value = value[0]
    assert value == 1


@pytest.mark.parametrize("n_dims", [5, 2**31])
def test_too_many_dims(n_dims):
    b = Builder().tensor("w", (32,), GGMLType.F32)
    data = bytearray(b.build().data)
    at = info_offset(bytes(data), "w") + 9
    data[at:at + 4] = struct.pack("<I", n_dims)
    expect_error(bytes(data), at, f"has {n_dims} dimensions; at most 4")


@pytest.mark.parametrize("alignment,reason", [(0, "not a power of two"), (48, "not a power of two")])
def test_bad_alignment_value(alignment, reason):
    data = Builder().add("general.alignment", V.UINT32, alignment).build().data
    expect_error(data, FIRST_KV, reason)


def test_bad_alignment_type():
    data = Builder().add("general.alignment", V.UINT64, 64).build().data
    expect_error(data, FIRST_KV, "general.alignment must be a UINT32, not UINT64")


def test_invalid_utf8_key():
    data = bytearray(Builder().add("kk", V.UINT8, 1).build().data)
    data[FIRST_KV + 8] = 0xFF
    expect_error(bytes(data), FIRST_KV, "key is not valid UTF-8")


def test_bool_not_0_or_1():
    data = bytearray(Builder().add("b", V.UINT8, 2).build().data)
    data[FIRST_KV + 9:FIRST_KV + 13] = struct.pack("<I", V.BOOL)
    expect_error(bytes(data), FIRST_KV + 8 + 1 + 4, "bool value 2 is neither 0 nor 1")


def test_bool_array_not_0_or_1():
    data = Builder().add("b", V.ARRAY, (V.BOOL, [1, 0, 3])).build().data
    expect_error(data, FIRST_KV + 8 + 1 + 4, "bool array holds 3")


def test_first_dim_not_a_multiple_of_block_size():
    data = Builder().tensor("w", (31, 2), GGMLType.Q4_0, data=b"").build().data
    expect_error(data, info_offset(data, "w") + 9, "first dimension 31 is not a multiple of the Q4_0 block size 32")


def test_errors_never_memoryerror_with_huge_lengths_under_a_memory_limit():
    """With address space capped at 1 GiB, every huge declared length still fails cleanly."""
    import subprocess
    import sys
    code = r"""
import resource, struct, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
sys.path.insert(0, sys.argv[1])
import tg_gguf
from tg_gguf_testutil import small_builder
built = small_builder().build()
for pos, size in built.length_fields:
    for value in (2**(8 * size) - 1, 2**(8 * size - 1), 2**31, 10**9):
        data = bytearray(built.data)
        data[pos:pos + size] = value.to_bytes(size, "little")
        try:
            tg_gguf.from_bytes(bytes(data))
        except tg_gguf.GGUFError:
            pass
print("ok", len(built.length_fields))
"""
    import os
    here = os.path.dirname(__file__)
    out = subprocess.run([sys.executable, "-c", code, here], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")
