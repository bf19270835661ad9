"""Read struct layouts out of the real C headers (the independent reference for the mlx5 layouts).

In:  ``mlx5dv.h`` (Debian ``libibverbs-dev``) and ``mlx5_ifc.h`` (Debian ``linux-headers-*-common``).
Out: ``c_struct_offsets(name)``: field -> (byte offset, size) of a plain C struct, computed by building
     a ctypes Structure from the parsed declaration (so alignment and ``packed`` follow the C rules);
     ``ifc_fields(name)``: dotted field path -> (bit offset, bit width) of an ``mlx5_ifc_<name>_bits``
     struct (the kernel's ``u8 field[width]`` bit-array convention), nested structs flattened.

Only the declaration forms these headers use are understood; anything else raises, so a header that
changes shape fails the test instead of being misread.
"""
from __future__ import annotations

import ctypes
import glob
import re
from functools import cache
from pathlib import Path

from tgcore.testing import in_ci

IN_CI = in_ci()
VERBS_DIR = Path("/usr/include/infiniband")
MLX5DV_H = VERBS_DIR / "mlx5dv.h"
IFC_GLOBS = ("/usr/src/linux-headers-*-common/include/linux/mlx5/mlx5_ifc.h",
             "/usr/src/linux-headers-*/include/linux/mlx5/mlx5_ifc.h", "/usr/include/linux/mlx5/mlx5_ifc.h")


def find_ifc_header() -> Path | None:
    for pattern in IFC_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return Path(hits[-1])
    return None


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _body(text: str, start: int) -> tuple[str, int]:
    """The text between the brace at ``start`` and its matching brace, and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i], i + 1
    raise ValueError("unbalanced braces")


def _split_members(body: str) -> list[str]:
    """Top-level member declarations of a struct body (nested braces kept whole)."""
    out, depth, cur = [], 0, []
    for ch in body:
        cur.append(ch)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            decl = "".join(cur).strip()
            if decl != ";":
                out.append(decl[:-1].strip())
            cur = []
    return out


# ------------------------------------------------------------------------------------------ plain C (mlx5dv.h)

_C_SCALARS = {"uint8_t": ctypes.c_uint8, "uint16_t": ctypes.c_uint16, "__be16": ctypes.c_uint16,
              "uint32_t": ctypes.c_uint32, "__be32": ctypes.c_uint32, "uint64_t": ctypes.c_uint64,
              "__be64": ctypes.c_uint64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32,
              "u64": ctypes.c_uint64}
_HEADER = {"text": ""}  # the header set being read (mlx5dv.h's directory, or Linux's mlx5 device.h)


def use_headers(which: str) -> None:
    """Read C structs from "verbs" (``/usr/include/infiniband/*.h``) or "device" (Linux ``mlx5/device.h``)."""
    _c_struct.cache_clear()
    if which == "verbs":
        paths = sorted(VERBS_DIR.glob("*.h"))
    else:
        ifc = find_ifc_header()
        if ifc is None:
            raise FileNotFoundError("Linux mlx5 headers not found")
        paths = [ifc.parent / "device.h"]
    _HEADER["text"] = "\n".join(_strip_comments(p.read_text()) for p in paths)


def _verbs_text() -> str:
    if not _HEADER["text"]:
        use_headers("verbs")
    return _HEADER["text"]


def _constant(name: str, text: str) -> int:
    m = re.search(rf"\b{name}\s*=\s*(\w+)", text) or re.search(rf"#define\s+{name}\s+(\w+)", text)
    if m is None:
        raise ValueError(f"constant {name} not found")
    return int(m.group(1), 0)


def _find_struct(text: str, name: str, kind: str = "struct") -> tuple[str, bool]:
    m = re.search(rf"\b{kind}\s+{re.escape(name)}\s*\{{", text)
    if m is None:
        raise LookupError(f"{kind} {name} not found in the headers")
    body, end = _body(text, m.end() - 1)
    packed = bool(re.match(r"\s*__attribute__\s*\(\(\s*__packed__", text[end:end + 80]))
    return body, packed


def _ctype_of(decl_type: str, text: str) -> type:
    decl_type = decl_type.strip()
    if decl_type in _C_SCALARS:
        return _C_SCALARS[decl_type]
    m = re.fullmatch(r"struct\s+(\w+)", decl_type)
    if m:
        return _c_struct(m.group(1))
    raise ValueError(f"unknown C type {decl_type!r}")


_PREFIX_ONLY = {"on": False}


def _members_to_ctypes(body: str, text: str) -> list[tuple[str, type]]:
    fields: list[tuple[str, type]] = []
    for k, decl in enumerate(_split_members(body)):
        nested = re.match(r"(struct|union)\s*\{", decl)
        if nested:  # an anonymous struct or union member
            inner, end = _body(decl, decl.index("{"))
            member_name = decl[end:].strip() or f"_anon{k}"
            base = ctypes.Structure if nested.group(1) == "struct" else ctypes.Union
            cls = type(f"anon{k}", (base,), {"_fields_": _members_to_ctypes(inner, text)})
            fields.append((member_name, cls))
            continue
        m = re.fullmatch(r"(.+?)\s+(\w+)\s*(?:\[(\w+)\])?", decl.replace("\n", " "))
        if m is None:
            raise ValueError(f"cannot parse the member declaration {decl!r}")
        try:
            ctype = _ctype_of(m.group(1), text)
        except (ValueError, LookupError):
            if _PREFIX_ONLY["on"]:  # the fields before an unknown one are still placed right
                break
            raise
        if m.group(3):
            count = m.group(3)
            ctype = ctype * (int(count, 0) if count[0].isdigit() else _constant(count, text))
        fields.append((m.group(2), ctype))
    return fields


@cache
def _c_struct(name: str) -> type:
    text = _verbs_text()
    body, packed = _find_struct(text, name)
    attrs: dict = {"_fields_": _members_to_ctypes(body, text)}
    if packed:
        attrs["_pack_"] = 1
    return type(name, (ctypes.Structure,), attrs)


def c_struct_offsets(name: str, prefix_only: bool = False) -> dict[str, tuple[int, int]]:
    """field -> (byte offset, size); members of anonymous structs/unions appear by their own names.

    ``prefix_only``: stop at the first member of an unknown type (the offsets before it are exact)."""
    _PREFIX_ONLY["on"] = prefix_only
    _c_struct.cache_clear()
    out: dict[str, tuple[int, int]] = {"__size__": (0, ctypes.sizeof(_c_struct(name)))}

    def walk(cls: type, base: int) -> None:
        for fname, ftype in cls._fields_:
            off = getattr(cls, fname).offset + base
            if fname.startswith("_anon"):
                walk(ftype, off)
            else:
                out[fname] = (off, ctypes.sizeof(ftype))
    walk(_c_struct(name), 0)
    return out


# ------------------------------------------------------------------------------------------ mlx5_ifc.h bit layouts

@cache
def _ifc_text() -> str:
    path = find_ifc_header()
    if path is None:
        raise FileNotFoundError("mlx5_ifc.h not found")
    return _strip_comments(path.read_text())


def _ifc_body(name: str) -> str:
    text = _ifc_text()
    for kind in ("struct", "union"):
        m = re.search(rf"\b{kind}\s+mlx5_ifc_{re.escape(name)}_bits\s*\{{", text)
        if m:
            return _body(text, m.end() - 1)[0]
    raise LookupError(f"mlx5_ifc_{name}_bits not found in mlx5_ifc.h")


@cache
def ifc_size(name: str) -> int:
    """Size in bits of ``mlx5_ifc_<name>_bits`` (a union: its largest member)."""
    text = _ifc_text()
    is_union = re.search(rf"\bunion\s+mlx5_ifc_{re.escape(name)}_bits\s*\{{", text) is not None
    sizes = [width for _, _, width in _ifc_members(name)]
    return max(sizes, default=0) if is_union else sum(sizes)


def _ifc_members(name: str) -> list[tuple[str, str | None, int]]:
    """(member name, nested struct name or None, width in bits) in order."""
    out: list[tuple[str, str | None, int]] = []
    is_union = re.search(rf"\bunion\s+mlx5_ifc_{re.escape(name)}_bits\s*\{{", _ifc_text()) is not None
    for decl in _split_members(_ifc_body(name)):
        decl = " ".join(decl.split())
        m = re.fullmatch(r"u8 (\w+)\[(\w*)\](?:\[(\w+)\])?", decl)
        if m:  # u8 name[bits], or an array u8 name[count][bits] (count empty or 0: a flexible array)
            first = int(m.group(2), 0) if m.group(2) else 0
            width = first * (int(m.group(3), 0) if m.group(3) else 1)
            out.append((m.group(1), None, width))
            continue
        m = re.fullmatch(r"(?:struct|union) mlx5_ifc_(\w+)_bits (\w+)(\[(\w*)\])?", decl)
        if m:  # a nested struct, or an array of them (empty count: a flexible array)
            count = (int(m.group(4), 0) if m.group(4) else 0) if m.group(3) else 1
            try:
                out.append((m.group(2), m.group(1), ifc_size(m.group(1)) * count))
            except (ValueError, LookupError):  # defined in another header
                if not is_union:
                    raise
            continue
        if is_union:  # a union's size is its largest member; these unions all have a sized reserved member
            continue
        raise ValueError(f"mlx5_ifc_{name}_bits: cannot parse {decl!r}")
    return out


@cache
def ifc_fields(name: str) -> dict[str, tuple[int, int]]:
    """dotted path -> (bit offset, bit width) in ``mlx5_ifc_<name>_bits``; nested structs flattened."""
    out: dict[str, tuple[int, int]] = {}
    text = _ifc_text()
    is_union = re.search(rf"\bunion\s+mlx5_ifc_{re.escape(name)}_bits\s*\{{", text) is not None
    bit = 0
    for member, nested, width in _ifc_members(name):
        out[member] = (bit, width)
        if nested is not None:
            for path, (b, w) in ifc_fields(nested).items():
                out[f"{member}.{path}"] = (bit + b, w)
        if not is_union:
            bit += width
    return out
