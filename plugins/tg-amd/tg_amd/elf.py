"""ELF64 little-endian shared objects: a writer (``link``) and a reader (``read_elf``), no relocations.

In (link): the header identity (OS ABI, ABI version, machine, flags), the sections -- allocated
ones tagged with the segment they load in (``"R"``, ``"RX"``, ``"RW"``), contents given as a
function of the final addresses -- and the symbols. Out: the file bytes. Layout: ELF header,
program headers, then the sections in segment order; each segment starts on a new page of the
address space while the file stays compact (file offset and address agree modulo the page, as
program loaders require); non-allocated sections and the section header table follow.
In (read_elf): file bytes. Out: an ``ElfFile`` with header fields, sections by name, program
headers, symbols and notes; a file that is not ELF64 little-endian raises ``ValueError``.
Constants and record layouts come from the System V gABI.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

ET_DYN = 3
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_HASH, SHT_DYNAMIC, SHT_NOTE, SHT_DYNSYM = 1, 2, 3, 5, 6, 7, 11
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
PT_LOAD, PT_DYNAMIC, PT_NOTE, PT_PHDR, PT_GNU_STACK = 1, 2, 4, 6, 0x6474E551
PF_X, PF_W, PF_R = 1, 2, 4
STB_LOCAL, STB_GLOBAL = 0, 1
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION = 0, 1, 2, 3
STV_DEFAULT, STV_PROTECTED = 0, 3
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 0, 4, 5, 6, 10, 11
EHDR = struct.Struct("<16sHHIQQQIHHHHHH")     # 64 bytes
PHDR = struct.Struct("<IIQQQQQQ")              # 56 bytes
SHDR = struct.Struct("<IIQQQQIIQQ")            # 64 bytes
SYM = struct.Struct("<IBBHQQ")                 # 24 bytes
DYN = struct.Struct("<qQ")                     # 16 bytes
SEGMENT_FLAGS = {"R": PF_R, "RX": PF_R | PF_X, "RW": PF_R | PF_W}
PAGE = 0x1000


@dataclass
class Section:
    name: str
    type: int
    flags: int
    size: int                                   # contents are exactly this long
    fill: Callable[[dict[str, Section]], bytes]  # contents, given every section's final address
    align: int = 1
    entsize: int = 0
    link: str = ""                              # name of the linked section (string table of a symbol table)
    info: int = 0
    segment: str = ""                           # "R", "RX", "RW" for allocated sections
    addr: int = 0
    offset: int = 0


@dataclass
class Symbol:
    name: str
    section: str
    value: Callable[[dict[str, Section]], int]  # address, given the final layout
    size: int
    type: int
    bind: int = STB_GLOBAL
    other: int = STV_DEFAULT


class StringTable:
    """A string table: ``add(name) -> offset``; ``data`` starts with the empty string."""

    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self.offsets: dict[str, int] = {"": 0}

    def add(self, name: str) -> int:
        if name not in self.offsets:
            self.offsets[name] = len(self.data)
            self.data += name.encode() + b"\0"
        return self.offsets[name]


def sysv_hash(name: bytes) -> int:
    """The System V symbol hash of the gABI's DT_HASH table."""
    h = 0
    for byte in name:
        h = ((h << 4) + byte) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def hash_table(names: list[str]) -> bytes:
    """A DT_HASH table for symbols ``names`` (index 0 is the null symbol), one bucket per symbol."""
    nbucket = max(1, len(names) - 1)
    buckets = [0] * nbucket
    chains = [0] * len(names)
    for index, name in enumerate(names):
        if index == 0:
            continue
        slot = sysv_hash(name.encode()) % nbucket
        chains[index] = buckets[slot]
        buckets[slot] = index
    return struct.pack(f"<II{nbucket}I{len(names)}I", nbucket, len(names), *buckets, *chains)


def symbol_table(symbols: list[Symbol], strings: StringTable, index: dict[str, int],
                 layout: dict[str, Section]) -> bytes:
    """Entries of a symbol table: the null symbol, then ``symbols`` (locals must come first)."""
    out = bytearray(SYM.size)
    for sym in symbols:
        out += SYM.pack(strings.add(sym.name), (sym.bind << 4) | sym.type, sym.other, index[sym.section],
                        sym.value(layout), sym.size)
    return bytes(out)


def note(owner: str, note_type: int, desc: bytes) -> bytes:
    """One ELF note record: name and descriptor each padded to 4 bytes."""
    name = owner.encode() + b"\0"
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    return struct.pack("<III", len(name), len(desc), note_type) + pad(name) + pad(desc)


def _align(value: int, align: int) -> int:
    return -(-value // align) * align if align > 1 else value


def _layout(sections: list[Section], start: int) -> list[tuple[str, int, int, int, int]]:
    """Assign offsets and addresses; returns the loadable segments (kind, offset, addr, filesz, memsz)."""
    segments: list[tuple[str, int, int, int, int]] = []
    offset = addr = start
    seg_start = (0, 0)
    kind = ""
    for sec in sections:
        if sec.segment != kind:
            if kind:
                segments.append((kind, seg_start[0], seg_start[1], offset - seg_start[0], addr - seg_start[1]))
            kind = sec.segment
            offset = _align(offset, sec.align)
            addr = _align(addr, PAGE) + offset % PAGE if segments or kind != "R" else offset
            seg_start = (offset, addr) if segments or kind != "R" else (0, 0)
        offset, addr = _align(offset, sec.align), _align(addr, sec.align)
        sec.offset, sec.addr = offset, addr
        offset, addr = offset + sec.size, addr + sec.size
    segments.append((kind, seg_start[0], seg_start[1], offset - seg_start[0], addr - seg_start[1]))
    return segments


@dataclass
class Identity:
    osabi: int
    abiversion: int
    machine: int
    flags: int


def link(ident: Identity, loaded: list[Section], unloaded: list[Section]) -> bytes:
    """The shared object with ``loaded`` sections (in segment order R, RX, RW) and ``unloaded`` ones."""
    order = {"R": 0, "RX": 1, "RW": 2}
    if [order[s.segment] for s in loaded] != sorted(order[s.segment] for s in loaded):
        raise ValueError("loaded sections must be grouped R, RX, RW")
    extra = {"dyn": any(s.type == SHT_DYNAMIC for s in loaded), "note": any(s.type == SHT_NOTE for s in loaded)}
    nkinds = len({s.segment for s in loaded})
    nphdr = 1 + nkinds + extra["dyn"] + extra["note"] + 1   # PHDR, LOADs, DYNAMIC, NOTE, GNU_STACK
    segments = _layout(loaded, EHDR.size + nphdr * PHDR.size)
    offset = loaded[-1].offset + loaded[-1].size
    for sec in unloaded:
        sec.offset = offset = _align(offset, sec.align)
        offset += sec.size
    by_name = {s.name: s for s in loaded + unloaded}
    shstrtab = StringTable()
    for sec in loaded + unloaded:
        shstrtab.add(sec.name)
    shstrtab.add(".shstrtab")
    shstr_offset = offset
    shoff = _align(shstr_offset + len(shstrtab.data), 8)
    phdrs = [PHDR.pack(PT_PHDR, PF_R, EHDR.size, EHDR.size, EHDR.size, nphdr * PHDR.size, nphdr * PHDR.size, 8)]
    for kind, off, addr, filesz, memsz in segments:
        phdrs.append(PHDR.pack(PT_LOAD, SEGMENT_FLAGS[kind], off, addr, addr, filesz, memsz, PAGE))
    for sec in loaded:
        if sec.type in (SHT_DYNAMIC, SHT_NOTE):
            ptype = PT_DYNAMIC if sec.type == SHT_DYNAMIC else PT_NOTE
            flags = SEGMENT_FLAGS[sec.segment]
            phdrs.append(PHDR.pack(ptype, flags, sec.offset, sec.addr, sec.addr, sec.size, sec.size, sec.align))
    phdrs.append(PHDR.pack(PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0, 0))
    index = {sec.name: i + 1 for i, sec in enumerate(loaded + unloaded)}
    index[""] = 0
    out = bytearray(shoff + (len(index) + 1) * SHDR.size)
    ident_bytes = b"\x7fELF" + bytes([2, 1, 1, ident.osabi, ident.abiversion]) + bytes(7)
    EHDR.pack_into(out, 0, ident_bytes, ET_DYN, ident.machine, 1, 0, EHDR.size, shoff, ident.flags, EHDR.size,
                   PHDR.size, nphdr, SHDR.size, len(index) + 1, len(index))
    out[EHDR.size:EHDR.size + nphdr * PHDR.size] = b"".join(phdrs)
    for sec in loaded + unloaded:
        data = sec.fill(by_name)
        if len(data) != sec.size:
            raise AssertionError(f"section {sec.name}: {len(data)} bytes, laid out for {sec.size}")
        out[sec.offset:sec.offset + sec.size] = data
    out[shstr_offset:shstr_offset + len(shstrtab.data)] = shstrtab.data
    pos = shoff + SHDR.size
    for sec in loaded + unloaded:
        SHDR.pack_into(out, pos, shstrtab.add(sec.name), sec.type, sec.flags, sec.addr, sec.offset, sec.size,
                       index[sec.link], sec.info, sec.align, sec.entsize)
        pos += SHDR.size
    SHDR.pack_into(out, pos, shstrtab.add(".shstrtab"), SHT_STRTAB, 0, 0, shstr_offset, len(shstrtab.data),
                   0, 0, 1, 0)
    return bytes(out)


# ----------------------------------------------------------------------------------------- reading
@dataclass
class ReadSection:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    data: bytes


@dataclass
class ReadSymbol:
    name: str
    value: int
    size: int
    type: int
    bind: int
    other: int
    section: str


@dataclass
class ElfFile:
    osabi: int
    abiversion: int
    type: int
    machine: int
    flags: int
    entry: int
    sections: dict[str, ReadSection] = field(default_factory=dict)
    segments: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)  # type flags off addr fsz msz
    symbols: dict[str, list[ReadSymbol]] = field(default_factory=dict)  # by table: ".symtab", ".dynsym"
    notes: list[tuple[str, int, bytes]] = field(default_factory=list)   # owner, type, descriptor

    def bytes_at(self, addr: int, size: int) -> bytes:
        """``size`` bytes of the loaded image at address ``addr`` (from the section holding them)."""
        for sec in self.sections.values():
            if sec.flags & SHF_ALLOC and sec.addr <= addr and addr + size <= sec.addr + sec.size:
                return sec.data[addr - sec.addr:addr - sec.addr + size]
        raise ValueError(f"no section holds {size} bytes at address {addr:#x}")


def _unpack(fmt: struct.Struct, data: bytes, offset: int, what: str) -> tuple:
    if offset < 0 or offset + fmt.size > len(data):
        raise ValueError(f"ELF: {what} at offset {offset} lies outside the {len(data)}-byte file")
    return fmt.unpack_from(data, offset)


def _cstring(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    if offset >= len(table) or end < 0:
        raise ValueError(f"ELF: string offset {offset} outside its table")
    return table[offset:end].decode()


def _notes(data: bytes) -> list[tuple[str, int, bytes]]:
    out, pos = [], 0
    while pos + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from("<III", data, pos)
        name_end = pos + 12 + namesz
        desc_start = pos + 12 + _align(namesz, 4)
        if desc_start + descsz > len(data):
            raise ValueError("ELF: note runs past the end of its section")
        out.append((data[pos + 12:name_end].rstrip(b"\0").decode(), kind, data[desc_start:desc_start + descsz]))
        pos = desc_start + _align(descsz, 4)
    return out


def read_elf(data: bytes) -> ElfFile:
    """Parse an ELF64 little-endian file (see module docstring)."""
    data = bytes(data)
    if len(data) < EHDR.size or data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file (bad magic)")
    if data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (ident, etype, machine, _version, entry, phoff, shoff, flags, _ehsize, _phentsize, phnum, _shentsize, shnum,
     shstrndx) = EHDR.unpack_from(data, 0)
    elf = ElfFile(ident[7], ident[8], etype, machine, flags, entry)
    raw = [_unpack(SHDR, data, shoff + i * SHDR.size, "section header") for i in range(shnum)]
    if shstrndx >= len(raw):
        raise ValueError("ELF: section name table index out of range")
    names_off, names_size = raw[shstrndx][4], raw[shstrndx][5]
    names = data[names_off:names_off + names_size]
    secs = []
    for name, stype, sflags, addr, off, size, slink, sinfo, _salign, _entsize in raw:
        body = b"" if stype == 8 else data[off:off + size]   # SHT_NOBITS has no file bytes
        if len(body) != size and stype != 8:
            raise ValueError(f"ELF: section {_cstring(names, name)!r} runs past the end of the file")
        secs.append(ReadSection(_cstring(names, name), stype, sflags, addr, off, size, slink, sinfo, body))
    elf.sections = {s.name: s for s in secs if s.name}
    elf.segments = [(p[0], p[1], p[2], p[3], p[5], p[6])
                    for p in (_unpack(PHDR, data, phoff + i * PHDR.size, "program header") for i in range(phnum))]
    for sec in secs:
        if sec.type in (SHT_SYMTAB, SHT_DYNSYM):
            strings = secs[sec.link].data if sec.link < len(secs) else b""
            syms = []
            for pos in range(SYM.size, sec.size - SYM.size + 1, SYM.size):
                name, info, other, shndx, value, size = SYM.unpack_from(sec.data, pos)
                where = secs[shndx].name if 0 < shndx < len(secs) else ""
                syms.append(ReadSymbol(_cstring(strings, name), value, size, info & 15, info >> 4, other, where))
            elf.symbols[sec.name] = syms
        if sec.type == SHT_NOTE:
            elf.notes += _notes(sec.data)
    return elf
