"""Code objects checked against LLVM: llvm-readelf reads them, llvm-objdump decodes them, llvm-mc agrees.

- ``llvm-readelf-19 -h -S -s -n -l``: header fields, sections, the ``name``/``name.kd`` symbols and the
  metadata note as LLVM decodes it (its YAML), with no warnings.
- ``llvm-objdump-19``: the descriptor decoded into ``.amdhsa_*`` directives; ``.text`` disassembles to
  our instructions.
- ``llvm-mc-19``: our descriptor equals the one llvm-mc assembles from the equivalent
  ``.amdhsa_kernel`` directives, field by field, for gfx1100/gfx1200/gfx942 at register granule
  boundaries and several LDS/kernarg sizes; e_flags equal llvm-mc's for the same -mcpu.
- Without the tools these skip, except under CI=true, where they fail. The MessagePack encoder
  is checked against byte strings from the format spec; bad input raises ``ValueError``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

import pytest
import tg_amd
from hypothesis import given
from hypothesis import strategies as st
from tg_amd import elf, msgpack
from tg_amd.codeobj import DESCRIPTOR_SIZE, decode_descriptor

ARCHS = ("gfx1100", "gfx1200", "gfx1201", "gfx942")
KERNEL = {  # a small program per arch: loads kernargs, touches VGPRs/SGPRs (and AGPRs on gfx942)
    "rdna": """
        s_load_b128 s[4:7], s[0:1], 0x0
        v_mov_b32 v9, 0
        s_wait_kmcnt 0
        global_store_b32 v9, v9, s[4:5]
        s_endpgm
    """,
    "gfx1100": """
        s_load_b128 s[4:7], s[0:1], 0x0
        v_mov_b32 v9, 0
        s_waitcnt lgkmcnt(0)
        global_store_b32 v9, v9, s[4:5]
        s_endpgm
    """,
    "gfx942": """
        s_load_dwordx4 s[4:7], s[0:1], 0x0
        v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[2:3], a[0:3]
        s_endpgm
    """,
}


def program(arch: str) -> str:
    return KERNEL.get(arch, KERNEL["rdna"])


def tool(name: str) -> str:
    path = shutil.which(f"{name}-19") or shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name}-19 not found; CI must install Debian's llvm-19")
        pytest.skip(f"{name}-19 not installed (apt-get install llvm-19)")
    return path


def run(args: list[str], stdin: str | None = None) -> str:
    proc = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{args[0]} failed:\n{proc.stderr}"
    assert "warning" not in proc.stderr, proc.stderr
    return proc.stdout


def written(data: bytes, tmp: str, name: str = "k.co") -> str:
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


# ----------------------------------------------------------------------------------------- llvm-mc
def amdhsa_directives(name: str, arch: str, p: dict[str, Any]) -> str:
    """The ``.amdhsa_kernel`` block that means the same as ``code_object(..., **p)`` (written independently)."""
    wg = p.get("workgroup_id", (True, False, False))
    lines = [
        f".amdhsa_group_segment_fixed_size {p.get('lds_size', 0)}",
        f".amdhsa_private_segment_fixed_size {p.get('scratch_size', 0)}",
        f".amdhsa_enable_private_segment {int(p.get('scratch_size', 0) > 0)}",
        f".amdhsa_kernarg_size {p['kernarg_size']}",
        f".amdhsa_next_free_sgpr {p['sgprs']}",
        f".amdhsa_user_sgpr_kernarg_segment_ptr {int(p.get('kernarg_ptr', True))}",
        f".amdhsa_user_sgpr_dispatch_ptr {int(p.get('dispatch_ptr', False))}",
        f".amdhsa_system_sgpr_workgroup_id_x {int(wg[0])}",
        f".amdhsa_system_sgpr_workgroup_id_y {int(wg[1])}",
        f".amdhsa_system_sgpr_workgroup_id_z {int(wg[2])}",
        f".amdhsa_system_vgpr_workitem_id {p.get('workitem_id_dims', 1) - 1}",
        ".amdhsa_float_denorm_mode_32 3",
        ".amdhsa_float_denorm_mode_16_64 3",
    ]
    if "user_sgprs" in p:
        lines.append(f".amdhsa_user_sgpr_count {p['user_sgprs']}")
    if arch == "gfx942":
        agprs = p.get("agprs", 0)
        accum = max(4, (p["vgprs"] + 3) // 4 * 4)
        lines += [f".amdhsa_next_free_vgpr {accum + agprs if agprs else p['vgprs']}", f".amdhsa_accum_offset {accum}"]
    else:
        lines += [f".amdhsa_next_free_vgpr {p['vgprs']}",
                  f".amdhsa_wavefront_size32 {int(p.get('wave32', True))}"]
    body = "\n  ".join(lines)
    return f".rodata\n.p2align 6\n.amdhsa_kernel {name}\n  {body}\n.end_amdhsa_kernel\n"


def llvm_mc_object(arch: str, kernels: dict[str, str], blocks: list[str], tmp: str) -> elf.ElfFile:
    """llvm-mc's relocatable object for the kernels (name -> code) and their ``.amdhsa_kernel`` blocks."""
    text = [".amdhsa_code_object_version 5", ".text"]
    for name, code in kernels.items():
        text += [f".globl {name}", ".p2align 8", f".type {name},@function", f"{name}:", code]
    src = "\n".join(text) + "\n" + "\n".join(blocks)
    out = os.path.join(tmp, f"ref_{arch}.o")
    proc = subprocess.run([tool("llvm-mc"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj", "-o", out],
                          input=src, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with open(out, "rb") as f:
        return elf.read_elf(f.read())


def relocatable_descriptor(obj: elf.ElfFile, name: str) -> bytes:
    """The 64 descriptor bytes of ``name.kd`` in a relocatable object (symbol values are section offsets)."""
    sym = next(s for s in obj.symbols[".symtab"] if s.name == f"{name}.kd")
    return obj.sections[sym.section].data[sym.value:sym.value + DESCRIPTOR_SIZE]


# parameter sets: register counts at granule edges, LDS and kernarg sizes, user/system SGPR choices
CASES: dict[str, list[dict[str, Any]]] = {
    "gfx1100": [
        dict(vgprs=1, sgprs=3, kernarg_size=0, kernarg_ptr=False, workgroup_id=(False, False, False)),
        dict(vgprs=8, sgprs=8, kernarg_size=24, lds_size=1024),
        dict(vgprs=9, sgprs=16, kernarg_size=256, lds_size=65536, workgroup_id=(True, True, True),
             workitem_id_dims=3),
        dict(vgprs=255, sgprs=105, kernarg_size=8, dispatch_ptr=True, workitem_id_dims=2),
        dict(vgprs=4, sgprs=10, kernarg_size=16, wave32=False),
        dict(vgprs=5, sgprs=10, kernarg_size=16, wave32=False, scratch_size=64),
        dict(vgprs=256, sgprs=10, kernarg_size=16, wave32=False, user_sgprs=6),
    ],
    "gfx1200": [
        dict(vgprs=16, sgprs=8, kernarg_size=24),
        dict(vgprs=17, sgprs=9, kernarg_size=32, lds_size=33280, workgroup_id=(True, True, False)),
        dict(vgprs=128, sgprs=40, kernarg_size=0, kernarg_ptr=False),
        dict(vgprs=256, sgprs=106, kernarg_size=64, dispatch_ptr=True, user_sgprs=8),
    ],
    "gfx942": [
        dict(vgprs=1, sgprs=3, kernarg_size=8),
        dict(vgprs=8, sgprs=10, kernarg_size=24, lds_size=4096),
        dict(vgprs=9, sgprs=11, kernarg_size=24, agprs=0),
        dict(vgprs=6, agprs=4, sgprs=16, kernarg_size=40),
        dict(vgprs=4, agprs=5, sgprs=17, kernarg_size=40, workgroup_id=(True, True, True)),
        dict(vgprs=256, agprs=256, sgprs=102, kernarg_size=512, lds_size=65536, workitem_id_dims=3),
    ],
}


@pytest.mark.parametrize("arch", sorted(CASES))
def test_descriptor_equals_llvm_mc(arch: str) -> None:
    kernels = {f"k{i}": "s_endpgm" for i in range(len(CASES[arch]))}
    blocks = [amdhsa_directives(name, arch, p) for name, p in zip(kernels, CASES[arch], strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        ref_obj = llvm_mc_object(arch, kernels, blocks, tmp)
    family = tg_amd.get_arch(arch).family
    for name, p in zip(kernels, CASES[arch], strict=True):
        data = tg_amd.code_object(name, "s_endpgm", arch, **p)
        ours = tg_amd.read_code_object(data)["kernels"][name]["descriptor"]
        ref = decode_descriptor(relocatable_descriptor(ref_obj, name), family)
        ours.pop("kernel_code_entry_byte_offset")  # a relocation in llvm-mc's object: checked against readelf below
        ref.pop("kernel_code_entry_byte_offset")
        diff = {k: (ours[k], ref[k]) for k in ref if ours[k] != ref[k]}
        assert not diff, f"{arch} {p}: fields differ (ours, llvm-mc): {diff}"
        assert not ours["reserved_nonzero"]
    assert ref_obj.flags == elf.read_elf(data).flags, "e_flags equal llvm-mc's for the same -mcpu"
    assert ref_obj.abiversion == elf.read_elf(data).abiversion == 3


def test_e_flags_equal_llvm_mc_for_every_arch() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHS:
            ref = llvm_mc_object(arch, {"k": "s_endpgm"}, [], tmp)
            assert tg_amd.read_code_object(tg_amd.code_object("k", "s_endpgm", arch))["e_flags"] == ref.flags, arch


# ------------------------------------------------------------------------------------- llvm-readelf
def readelf(path: str) -> str:
    return run([tool("llvm-readelf"), "-h", "-S", "-s", "-n", "-l", "-d", path])


def field(text: str, label: str) -> str:
    m = re.search(rf"^\s*{re.escape(label)}:\s*(.+?)\s*$", text, re.M)
    assert m, f"{label} not in llvm-readelf output"
    return m.group(1)


@pytest.mark.parametrize("arch", ARCHS)
def test_readelf_reads_header_symbols_and_note(arch: str) -> None:
    wave = 64 if arch == "gfx942" else 32
    data = tg_amd.code_object("gemm_kernel", program(arch), arch, kernargs=["a", "b", ("n", "by_value", 4)],
                              lds_size=2048, max_workgroup_size=128)
    with tempfile.TemporaryDirectory() as tmp:
        out = readelf(written(data, tmp))
    assert field(out, "Class") == "ELF64"
    assert field(out, "OS/ABI") == "AMDGPU - HSA"
    assert field(out, "ABI Version") == "3"
    assert field(out, "Type").startswith("DYN")
    assert field(out, "Machine") == "EM_AMDGPU"
    assert field(out, "Flags").split(", ")[1] == arch
    for section in (".text", ".rodata", ".dynsym", ".dynstr", ".symtab", ".strtab", ".note", ".dynamic", ".hash"):
        assert re.search(rf"\] {re.escape(section)}\s", out), f"section {section} missing"
    for kind in ("LOAD", "NOTE", "DYNAMIC"):
        assert re.search(rf"^\s*{kind}\s", out, re.M), f"program header {kind} missing"
    syms = re.findall(r"^\s*\d+: ([0-9a-f]+)\s+(\d+) (\w+)\s+GLOBAL \w+\s+\d+ (\S+)$", out, re.M)
    by_name = {name: (int(value, 16), int(size), kind) for value, size, kind, name in syms}
    assert by_name["gemm_kernel"][2] == "FUNC"
    assert by_name["gemm_kernel.kd"][1:] == (64, "OBJECT")
    assert len(syms) == 4, "both symbols in .dynsym and .symtab"
    # the metadata note, as LLVM decodes the MessagePack into YAML
    assert "NT_AMDGPU_METADATA" in out
    expect = {".name": "gemm_kernel", ".symbol": "gemm_kernel.kd", ".kernarg_segment_size": "24",
              ".kernarg_segment_align": "8", ".group_segment_fixed_size": "2048", ".wavefront_size": str(wave),
              ".max_flat_workgroup_size": "128", "amdhsa.target": f"amdgcn-amd-amdhsa--{arch}"}
    used = tg_amd.register_usage(program(arch), arch)
    expect[".sgpr_count"] = str(8 + (6 if arch == "gfx942" else 2))   # s[4:7] plus VCC (+FLAT_SCRATCH/XNACK_MASK)
    expect[".vgpr_count"] = str(8 if arch == "gfx942" else 10)
    assert used.sgprs == 8 and used.vgprs == (4 if arch == "gfx942" else 10)
    for key, value in expect.items():
        assert re.search(rf"^\s*-?\s*{re.escape(key)}:\s+{re.escape(value)}$", out, re.M), f"{key}: {value}"
    assert re.search(r"amdhsa.version:\s*\n\s*- 1\n\s*- 2", out)
    assert re.findall(r"\.value_kind:\s+(\w+)", out) == ["global_buffer", "global_buffer", "by_value"]
    assert re.findall(r"\.offset:\s+(\d+)", out) == ["0", "8", "16"]


def note_yaml(readelf_out: str) -> str:
    m = re.search(r"^\s*---\n(.*?)^\.\.\.$", readelf_out, re.M | re.S)
    assert m, readelf_out
    return m.group(1)


@pytest.mark.parametrize("arch", ("gfx1200", "gfx942"))
def test_metadata_passes_llvm_mc_verifier(arch: str) -> None:
    """llvm-mc checks ``.amdgpu_metadata`` against the code object v5 schema (required keys, types, enums):
    LLVM's YAML of our note passes it and comes back as the same map; without a required key it fails."""
    data = tg_amd.code_object("k", program(arch), arch, kernargs=["a", ("n", "by_value", 4)], lds_size=64)
    with tempfile.TemporaryDirectory() as tmp:
        yaml = note_yaml(readelf(written(data, tmp)))
        broken = yaml.replace(".wavefront_size:", ".wavefront_sizes:")
        results = []
        for text in (yaml, broken):
            src = f".amdhsa_code_object_version 5\n.amdgpu_metadata\n{text}.end_amdgpu_metadata\n"
            obj = os.path.join(tmp, "md.o")
            proc = subprocess.run([tool("llvm-mc"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj",
                                   "-o", obj], input=src, capture_output=True, text=True, timeout=60)
            results.append(proc.returncode == 0)
            if proc.returncode == 0:
                with open(obj, "rb") as f:
                    notes = elf.read_elf(f.read()).notes
                ours = tg_amd.read_code_object(data)["metadata"]
                assert [msgpack.unpack(desc) for _, kind, desc in notes if kind == 32] == [ours]
            else:
                assert "invalid HSA metadata" in proc.stderr
    assert results == [True, False]


@pytest.mark.parametrize("arch", ("gfx1100", "gfx1200", "gfx942"))
def test_matches_shared_object_linked_by_lld(arch: str) -> None:
    """ld.lld-19 links llvm-mc's object (same code, equivalent directives, our note's YAML) into the
    reference shared object: same identity and e_flags, descriptor, code, metadata, segments' kinds."""
    lld = tool("ld.lld")
    params = dict(kernarg_size=24, lds_size=1024, sgprs=12, vgprs=10)
    data = tg_amd.code_object("k", program(arch), arch, kernargs=["a", "b", ("n", "by_value", 4)], **params)
    with tempfile.TemporaryDirectory() as tmp:
        yaml = note_yaml(readelf(written(data, tmp)))
        block = amdhsa_directives("k", arch, {**params, "agprs": 4} if arch == "gfx942" else params)
        src = (f".amdhsa_code_object_version 5\n.amdgcn_target \"amdgcn-amd-amdhsa--{arch}\"\n"
               f".text\n.globl k\n.p2align 8\n.type k,@function\nk:\n{program(arch)}\n.Lend:\n.size k, .Lend-k\n"
               f"{block}.amdgpu_metadata\n{yaml}.end_amdgpu_metadata\n")
        obj, so = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.so")
        run([tool("llvm-mc"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj", "-o", obj], src)
        run([lld, "-shared", obj, "-o", so])
        with open(so, "rb") as f:
            ref_bytes = f.read()
    ours_elf, ref_elf = elf.read_elf(data), elf.read_elf(ref_bytes)
    for attr in ("osabi", "abiversion", "type", "machine", "flags", "entry"):
        assert getattr(ours_elf, attr) == getattr(ref_elf, attr), attr
    ours, ref = tg_amd.read_code_object(data), tg_amd.read_code_object(ref_bytes)
    assert ours["metadata"] == ref["metadata"]
    k_ours, k_ref = ours["kernels"]["k"], ref["kernels"]["k"]
    assert k_ours["code"] == k_ref["code"] == tg_amd.assemble(program(arch), arch)
    assert k_ours["descriptor"] == k_ref["descriptor"] or \
        {**k_ours["descriptor"], "kernel_code_entry_byte_offset": 0} == \
        {**k_ref["descriptor"], "kernel_code_entry_byte_offset": 0}
    for k in (k_ours, k_ref):   # in both, the entry offset leads from the descriptor to the code
        assert k["descriptor_address"] + k["descriptor"]["kernel_code_entry_byte_offset"] == k["code_address"]
    kinds = {elf.PT_LOAD, elf.PT_DYNAMIC, elf.PT_PHDR, elf.PT_GNU_STACK, elf.PT_NOTE}
    assert {seg[0] for seg in ref_elf.segments} & kinds == {seg[0] for seg in ours_elf.segments} & kinds
    assert [seg[1] for seg in ours_elf.segments if seg[0] == elf.PT_LOAD] == \
        [seg[1] for seg in ref_elf.segments if seg[0] == elf.PT_LOAD]     # R, RX, RW in that order
    for table in (".dynsym", ".symtab"):
        ref_syms = {(s.name, s.type, s.bind, s.other, s.section) for s in ref_elf.symbols[table]
                    if s.name.startswith("k")}
        assert {(s.name, s.type, s.bind, s.other, s.section) for s in ours_elf.symbols[table] if s.name} == ref_syms


# ------------------------------------------------------------------------------------ llvm-objdump
def objdump_directives(path: str, name: str) -> dict[str, int]:
    out = run([tool("llvm-objdump"), "-D", f"--disassemble-symbols={name}.kd", path])
    assert f".amdhsa_kernel {name}" in out and ".end_amdhsa_kernel" in out, out
    return {k: int(v, 0) for k, v in re.findall(r"^\s*\.amdhsa_(\w+) (-?\d+|0x[0-9a-fA-F]+)$", out, re.M)}


@pytest.mark.parametrize("arch", ARCHS)
def test_objdump_decodes_descriptor_and_text(arch: str) -> None:
    data = tg_amd.code_object("k", program(arch), arch, kernarg_size=32, lds_size=8192,
                              workgroup_id=(True, True, False), workitem_id_dims=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = written(data, tmp)
        d = objdump_directives(path, "k")
        text = run([tool("llvm-objdump"), "-d", "--disassemble-symbols=k", path])
        syms = run([tool("llvm-readelf"), "-s", path])
    assert d["group_segment_fixed_size"] == 8192 and d["kernarg_size"] == 32
    assert d["user_sgpr_kernarg_segment_ptr"] == 1 and d["user_sgpr_dispatch_ptr"] == 0
    assert [d[f"system_sgpr_workgroup_id_{axis}"] for axis in "xyz"] == [1, 1, 0]
    assert d["system_vgpr_workitem_id"] == 1
    assert d["float_denorm_mode_32"] == 3 and d["float_denorm_mode_16_64"] == 3
    if arch == "gfx942":
        assert d["accum_offset"] == 4 and d["next_free_vgpr"] == 8   # v[0:3] then a[0:3], granule 8
        assert d["next_free_sgpr"] == 16                             # 8 + 6 extras -> granule 8
        assert "wavefront_size32" not in d
    else:
        assert d["next_free_vgpr"] == 16 and d["wavefront_size32"] == 1   # v9 -> 10 VGPRs -> granule 8
        assert d["workgroup_processor_mode"] == 1 and d["memory_ordered"] == 1
    # the code entry: the descriptor's offset field leads to the kernel symbol
    symbol_re = r"^\s*\d+: ([0-9a-f]+)\s+\d+ \w+\s+\w+\s+\w+\s+\d+ (\S+)$"
    values = {m.group(2): int(m.group(1), 16) for m in re.finditer(symbol_re, syms, re.M)}
    desc = tg_amd.read_code_object(data)["kernels"]["k"]["descriptor"]
    assert values["k.kd"] + desc["kernel_code_entry_byte_offset"] == values["k"]
    assert values["k"] % 256 == 0 and values["k.kd"] % 64 == 0
    assert objdump_instructions(text) == tg_amd.assemble(program(arch), arch)


def objdump_instructions(listing: str) -> bytes:
    """The bytes llvm-objdump shows next to its instructions (``// addr: WORD WORD``)."""
    lines = re.findall(r"^\s+(\S.*?)\s+// [0-9A-F]+: ((?:[0-9A-F]{8} ?)+)$", listing, re.M)
    assert lines, listing
    return b"".join(int(w, 16).to_bytes(4, "little") for _, ws in lines for w in ws.split())


TEXT_PROGRAM = {  # several formats per family, for the .text comparison with llvm-objdump
    "rdna4": """
        s_load_b128 s[4:7], s[0:1], 0x10
        v_dual_mov_b32 v0, 0 :: v_dual_mov_b32 v1, 0
        v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]
        ds_load_b128 v[4:7], v1 offset:512
        global_load_b128 v[4:7], v6, s[4:5] offset:16
        v_mul_lo_u32 v6, v48, 8192
        s_barrier_signal -1
        s_barrier_wait 0xffff
        s_wait_dscnt 0
        global_store_b16 v14, v17, s[8:9]
        s_endpgm
    """,
    "rdna3": """
        s_load_b128 s[4:7], s[0:1], 0x10
        v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]
        ds_load_b128 v[4:7], v1 offset:512
        v_add_f32_e64 v1, -v2, |v3|
        s_waitcnt lgkmcnt(0)
        s_barrier
        s_endpgm
    """,
    "cdna3": """
        s_load_dwordx4 s[4:7], s[0:1], 0x10
        v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[2:3], a[0:3]
        ds_read_b128 v[4:7], v1 offset:512
        global_load_dwordx4 v[4:7], v6, s[4:5] offset:16
        s_waitcnt vmcnt(0) lgkmcnt(0)
        s_endpgm
    """,
}


@pytest.mark.parametrize("arch", ARCHS)
def test_objdump_text_is_our_instructions(arch: str) -> None:
    """llvm-objdump -d of .text: the same bytes, the same mnemonics, and each of its lines assembles (by us)
    to that instruction's bytes (its spelling of operands may differ from ours: ``0x0`` vs ``0``)."""
    code = tg_amd.assemble(TEXT_PROGRAM[tg_amd.get_arch(arch).family], arch)
    with tempfile.TemporaryDirectory() as tmp:
        listing = run([tool("llvm-objdump"), "-d", written(tg_amd.code_object("k", code, arch), tmp)])
    assert objdump_instructions(listing) == code
    theirs = re.findall(r"^\s+(\S.*?)\s+// [0-9A-F]+: ((?:[0-9A-F]{8} ?)+)$", listing, re.M)
    ours = tg_amd.disassemble(code, arch).split("\n")
    assert [t.split()[0] for t, _ in theirs] == [line.split()[0] for line in ours if line.strip()]
    for text, words in theirs:
        assert tg_amd.assemble(text, arch) == b"".join(int(w, 16).to_bytes(4, "little") for w in words.split()), text


@pytest.mark.parametrize("arch", ("gfx1100", "gfx1200", "gfx942"))
def test_objdump_directives_reassemble_to_our_descriptor(arch: str) -> None:
    """llvm-objdump's decoded directives, fed back to llvm-mc, rebuild our descriptor bit for bit.

    On gfx942 llvm-objdump prints ``.amdhsa_reserve_xnack_mask 0`` (accepted only with -mattr=-xnack)
    and a next_free_sgpr that already holds the reserved extras, which llvm-mc then adds again: there
    the SGPR granule is left out here (test_descriptor_equals_llvm_mc checks it from directives).
    """
    data = tg_amd.code_object("k", program(arch), arch, kernarg_size=48, lds_size=512, dispatch_ptr=True)
    mattr = ["-mattr=-xnack"] if arch == "gfx942" else []
    with tempfile.TemporaryDirectory() as tmp:
        out = run([tool("llvm-objdump"), "-D", "--disassemble-symbols=k.kd", written(data, tmp)])
        block = out[out.index(".amdhsa_kernel"):out.index(".end_amdhsa_kernel") + len(".end_amdhsa_kernel")]
        src = ".amdhsa_code_object_version 5\n.text\nk:\ns_endpgm\n.rodata\n.p2align 6\n" + block + "\n"
        obj = os.path.join(tmp, "rt.o")
        run([tool("llvm-mc"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", *mattr, "-filetype=obj", "-o", obj], src)
        with open(obj, "rb") as f:
            ref = bytearray(relocatable_descriptor(elf.read_elf(f.read()), "k"))
    info = tg_amd.read_code_object(data)["kernels"]["k"]
    rodata = elf.read_elf(data).sections[".rodata"]
    ours = bytearray(rodata.data[info["descriptor_address"] - rodata.addr:][:DESCRIPTOR_SIZE])
    ours[16:24] = bytes(8)           # the code entry offset is a relocation in llvm-mc's object
    if arch == "gfx942":
        for d in (ours, ref):
            d[48] &= 0x3F            # GRANULATED_WAVEFRONT_SGPR_COUNT, bits 6..9 of rsrc1
            d[49] &= 0xFC
    assert ours == ref


def _section_bias(data: bytes, name: str) -> int:
    sec = elf.read_elf(data).sections[name]
    return sec.addr - sec.offset


# --------------------------------------------------------------------------------- without LLVM
def test_read_code_object_round_trip() -> None:
    code = tg_amd.assemble(program("gfx1200"), "gfx1200")
    info = tg_amd.read_code_object(tg_amd.code_object("k", code, "gfx1200", kernargs=["x", "y"]))
    k = info["kernels"]["k"]
    assert info["arch"] == "gfx1200" and info["xnack"] == "unsupported" and k["code"] == code
    assert k["descriptor"]["kernarg_size"] == 16 and k["descriptor"]["rsrc2"]["user_sgpr_count"] == 2
    assert k["descriptor"]["rsrc1"]["granulated_workitem_vgpr_count"] == 1      # v9 -> 10 VGPRs, granule 8
    assert k["metadata"][".sgpr_count"] == 10 and k["metadata"][".vgpr_count"] == 10
    info = tg_amd.read_code_object(tg_amd.code_object("m", program("gfx942"), "gfx942"))
    assert (info["xnack"], info["sramecc"]) == ("any", "any")
    assert info["kernels"]["m"]["metadata"][".agpr_count"] == 4


def test_same_code_from_text_bytes_and_dsl() -> None:
    from tg_amd.dsl import s, s_endpgm, s_load_b128, v, v_mov_b32
    dsl = [s_load_b128(s[4:7], s[0:1], 0), v_mov_b32(v[3], 0), s_endpgm()]
    text = "s_load_b128 s[4:7], s[0:1], 0x0\nv_mov_b32 v3, 0\ns_endpgm"
    objs = {tg_amd.code_object("k", c, "gfx1200") for c in (dsl, text, tg_amd.assemble(text, "gfx1200"))}
    assert len(objs) == 1


def test_register_usage_reads_every_operand() -> None:
    use = tg_amd.register_usage("""
        v_dual_mov_b32 v0, 0 :: v_dual_mov_b32 v41, 0
        v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]
        v_add_f32_e64 v1, -v2, |v50|
        s_mov_b32 s10, ttmp9
        s_endpgm
    """, "gfx1200")
    assert (use.sgprs, use.vgprs, use.agprs) == (11, 51, 0)
    use = tg_amd.register_usage("v_mfma_f32_16x16x16_f16 a[4:7], v[0:1], v[2:3], a[4:7]\ns_endpgm", "gfx942")
    assert (use.sgprs, use.vgprs, use.agprs) == (0, 4, 8)


BAD = [
    (dict(arch="gfx1030"), "unsupported arch"),
    (dict(arch="gfx90a"), "unsupported arch"),
    (dict(name=""), "kernel name"),
    (dict(name="a b"), "kernel name"),
    (dict(kernarg_size=20), "multiple of the kernarg alignment"),
    (dict(kernarg_size=16, kernarg_align=6), "power of two"),
    (dict(vgprs=257), "vgprs = 257 out of range"),
    (dict(vgprs=5), "the code uses 10"),
    (dict(arch="gfx942", code=KERNEL["gfx942"], vgprs=257), "vgprs = 257 out of range"),
    (dict(arch="gfx942", code=KERNEL["gfx942"], agprs=300), "agprs = 300 out of range"),
    (dict(arch="gfx942", code=KERNEL["gfx942"], wave32=True), "wave64 only"),
    (dict(sgprs=107), "sgprs = 107 out of range"),
    (dict(sgprs=1, code="s_endpgm"), "hardware initialises 2"),
    (dict(user_sgprs=17), "user_sgprs = 17"),
    (dict(user_sgprs=1), "the code uses 2"),
    (dict(lds_size=65537), "lds_size"),
    (dict(kernargs=["a", "b"], kernarg_size=8), "after kernarg_size 8"),
    (dict(kernargs=["a", "a"]), "names repeat"),
    (dict(kernargs=[("x", "image", 8)]), "value kind"),
    (dict(kernargs=[("p", "global_buffer", 4)]), "8 bytes"),
    (dict(workgroup_id=(True, False)), "three flags"),
    (dict(workitem_id_dims=4), "1, 2 or 3"),
    (dict(max_workgroup_size=2048), "max_workgroup_size"),
    (dict(code=b""), "no code"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_a_clear_value_error(change: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = dict(name="k", code=KERNEL["rdna"], arch="gfx1200")
    args.update(change)
    with pytest.raises(ValueError, match=re.escape(message)):
        tg_amd.code_object(args.pop("name"), args.pop("code"), args.pop("arch"), **args)


def test_reader_rejects_what_is_not_a_code_object() -> None:
    for junk, message in ((b"", "bad magic"), (b"\x7fELF" + bytes(60), "64-bit little-endian"),
                          (b"\x7fELF\x02\x01" + bytes(58), "section name table")):
        with pytest.raises(ValueError, match=message):
            tg_amd.read_code_object(junk)
    with open("/proc/self/exe", "rb") as f:   # the Python interpreter: ELF, but not AMDGPU
        with pytest.raises(ValueError, match="not an AMDHSA code object"):
            tg_amd.read_code_object(f.read(1 << 16))


# ------------------------------------------------------------------------------------ MessagePack
SPEC_BYTES = [  # value -> encoding, from the MessagePack format spec's type tables
    (None, "c0"), (False, "c2"), (True, "c3"), (0, "00"), (127, "7f"), (128, "cc80"), (255, "ccff"),
    (256, "cd0100"), (65536, "ce00010000"), (2**32, "cf0000000100000000"), (-1, "ff"), (-32, "e0"),
    (-33, "d0df"), (-129, "d1ff7f"), (-(2**31), "d280000000"), (-(2**31) - 1, "d3ffffffff7fffffff"),
    ("", "a0"), ("a" * 31, "bf" + "61" * 31), ("a" * 32, "d920" + "61" * 32), ("a" * 256, "da0100" + "61" * 256),
    (b"\x01", "c40101"), ([], "90"), ([1, 2], "920102"), (list(range(16)), "dc0010" + bytes(range(16)).hex()),
    ({}, "80"), ({"a": 1}, "81a16101"),
]


@pytest.mark.parametrize(("value", "hexed"), SPEC_BYTES)
def test_msgpack_matches_spec_bytes(value: Any, hexed: str) -> None:
    assert msgpack.pack(value).hex() == hexed
    assert msgpack.unpack(bytes.fromhex(hexed)) == value


def test_msgpack_map16_header() -> None:
    big = {f"k{i:02d}": i for i in range(16)}
    packed = msgpack.pack(big)
    assert packed[:3] == bytes.fromhex("de0010") and msgpack.unpack(packed) == big


json_like = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=40),
                         lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                                     max_size=5), max_leaves=20)


@given(json_like)
def test_msgpack_round_trip(value: Any) -> None:
    assert msgpack.unpack(msgpack.pack(value)) == value


def test_msgpack_rejects_bad_data() -> None:
    for data, message in ((b"\xcd\x01", "data ends"), (b"\xc1", "unsupported type"), (b"\x01\x02", "trailing")):
        with pytest.raises(ValueError, match=message):
            msgpack.unpack(data)
    with pytest.raises(ValueError, match="does not fit 64 bits"):
        msgpack.pack(2**64)
    with pytest.raises(ValueError, match="cannot encode"):
        msgpack.pack(1.5)


@given(st.data())
def test_damaged_code_objects_raise_value_error(data: st.DataObject) -> None:
    """Truncated or corrupted files either decode or raise ValueError -- never another exception."""
    good = bytearray(tg_amd.code_object("k", KERNEL["gfx942"], "gfx942", kernargs=["a"]))
    if data.draw(st.booleans()):
        damaged = good[:data.draw(st.integers(0, len(good) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            good[data.draw(st.integers(0, len(good) - 1))] = data.draw(st.integers(0, 255))
        damaged = good
    try:
        tg_amd.read_code_object(bytes(damaged))
    except ValueError:
        pass


# ---------------------------------------------------------------------- a whole kernel in LLVM syntax
def kernel_source(arch: str) -> str:
    """A loop adding 1.0 to out[i] n times, with labels and branches, and its .amdhsa_kernel block."""
    rdna = arch != "gfx942"
    wait_km = "s_wait_kmcnt 0" if arch.startswith("gfx12") else "s_waitcnt lgkmcnt(0)"
    wait_vm = "s_wait_loadcnt 0" if arch.startswith("gfx12") else "s_waitcnt vmcnt(0)"
    load = "s_load_b64 s[4:5], s[0:1], 0x0\n  s_load_b32 s6, s[0:1], 0x8" if rdna else \
        "s_load_dwordx2 s[4:5], s[0:1], 0x0\n  s_load_dword s6, s[0:1], 0x8"
    gload, gstore = ("global_load_b32", "global_store_b32") if rdna else ("global_load_dword", "global_store_dword")
    vadd = "v_lshlrev_b32 v1, 2, v0"
    block = [".amdhsa_group_segment_fixed_size 256", ".amdhsa_private_segment_fixed_size 0",
             ".amdhsa_kernarg_size 16", ".amdhsa_user_sgpr_kernarg_segment_ptr 1", ".amdhsa_next_free_sgpr 8",
             ".amdhsa_system_sgpr_workgroup_id_x 1", ".amdhsa_system_vgpr_workitem_id 0",
             ".amdhsa_float_denorm_mode_32 3", ".amdhsa_float_denorm_mode_16_64 3"]
    block += [".amdhsa_next_free_vgpr 8", ".amdhsa_accum_offset 8"] if not rdna else \
        [".amdhsa_next_free_vgpr 8", ".amdhsa_wavefront_size32 1"]
    return f""".amdhsa_code_object_version 5
.text
.globl k
.p2align 8
.type k,@function
k:
  {load}
  {wait_km}
  {vadd}
  {gload} v2, v1, s[4:5]
  {wait_vm}
loop:
  v_add_f32_e32 v2, 1.0, v2
  s_add_u32 s6, s6, -1
  s_cmp_lg_u32 s6, 0
  s_cbranch_scc1 loop
  {gstore} v1, v2, s[4:5]
  s_endpgm
.rodata
.p2align 6
.amdhsa_kernel k
  {chr(10).join('  ' + b for b in block)}
.end_amdhsa_kernel
"""


@pytest.mark.parametrize("arch", ARCHS)
def test_whole_kernel_in_llvm_syntax_matches_llvm_mc(arch: str) -> None:
    """The same source through tg_amd.kernel_object and llvm-mc: equal .text, equal descriptor; llvm-readelf
    reads ours (header, symbols, note)."""
    src = kernel_source(arch)
    data = tg_amd.kernel_object(src, arch)
    info = tg_amd.read_code_object(data)["kernels"]["k"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ref.o")
        proc = subprocess.run([tool("llvm-mc"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj",
                               "-o", out], input=src, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        with open(out, "rb") as f:
            ref = elf.read_elf(f.read())
        text = readelf(written(data, tmp))
    assert info["code"] == ref.sections[".text"].data
    ours, theirs = info["descriptor"], decode_descriptor(relocatable_descriptor(ref, "k"), tg_amd.get_arch(arch).family)
    ours.pop("kernel_code_entry_byte_offset")
    theirs.pop("kernel_code_entry_byte_offset")
    assert {k: (ours[k], theirs[k]) for k in theirs if ours[k] != theirs[k]} == {}
    assert "k.kd" in text and "AMDGPU" in text


def test_kernel_source_errors_are_clear() -> None:
    with pytest.raises(tg_amd.AsmError, match="no .amdhsa_kernel block"):
        tg_amd.kernel_object("k:\n  s_endpgm\n", "gfx1200")
    with pytest.raises(tg_amd.AsmError, match="not supported"):
        tg_amd.kernel_object("k:\n  s_endpgm\n.amdhsa_kernel k\n  .amdhsa_ieee_mode 0\n.end_amdhsa_kernel\n", "gfx1200")
