"""AMDHSA code objects: ``code_object(name, code, arch, ...) -> bytes`` and ``read_code_object(data) -> dict``.

In (code_object): a kernel's machine code (bytes, LLVM-syntax text, or a DSL program), its arch and
its launch facts (kernarg segment size and arguments, LDS size, user SGPRs, workgroup-id SGPRs,
wave size). Out: an ELF64 shared object the ROCm loader accepts (code object v5): ``.text`` with
symbol ``name``, the 64-byte kernel descriptor ``name.kd`` in ``.rodata``, dynamic and static
symbol tables, and the ``NT_AMDGPU_METADATA`` note (MessagePack). Register counts not given are
read from the code (every register operand of every instruction, plus the SGPRs and VGPRs the
hardware initialises) and rounded to the arch's granule in ``COMPUTE_PGM_RSRC1``.
In (read_code_object): such a file. Out: arch, e_flags, metadata and, per kernel, its code and
its descriptor with every bit field decoded by name.
How: the field layouts below are data, transcribed from LLVM's AMDGPUUsage document (ELF
header, e_flags, kernel descriptor, code object v5 metadata); ``tg_amd.elf`` lays out the file
and ``tg_amd.msgpack`` encodes the note. The tests compare all of it with llvm-mc, llvm-readelf
and llvm-objdump.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tg_amd import elf, msgpack
from tg_amd.arch import ARCHS, FAMILIES, Arch

# --------------------------------------------------------------------------------------- ELF identity
EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ELFABIVERSION_AMDGPU_HSA_V5 = 3
NT_AMDGPU_METADATA = 32
METADATA_VERSION = [1, 2]                  # amdhsa.version of code object v5
XNACK_ANY, SRAMECC_ANY = 0x100, 0x400      # EF_AMDGPU_FEATURE_*_ANY_V4
FEATURE_NAMES = {0: "unsupported", 1: "any", 2: "off", 3: "on"}


@dataclass(frozen=True)
class Target:
    mach: int            # EF_AMDGPU_MACH_AMDGCN_*
    features: int        # xnack/sramecc bits LLVM sets for the plain processor name
    max_vgprs: int       # architectural VGPRs a wave may allocate
    max_agprs: int       # accumulation VGPRs (CDNA)
    sgpr_extra: int      # SGPRs reserved after the program's own: VCC (+ FLAT_SCRATCH/XNACK_MASK on GFX9)
    sgpr_granule: int    # encoding granule of GRANULATED_WAVEFRONT_SGPR_COUNT; 0: the field is unused (GFX10+)
    system_sgprs_in_ttmp: bool  # workgroup ids arrive in TTMP registers (GFX12), not after the user SGPRs


TARGETS = {
    "gfx1100": Target(0x041, 0, 256, 0, 2, 0, False),
    "gfx1200": Target(0x048, 0, 256, 0, 2, 0, True),
    "gfx1201": Target(0x04E, 0, 256, 0, 2, 0, True),
    "gfx942": Target(0x04C, XNACK_ANY | SRAMECC_ANY, 256, 256, 6, 8, False),
}
MACH_NAMES = {t.mach: name for name, t in TARGETS.items()}
MAX_USER_SGPRS = 16
MAX_LDS = 65536
MAX_WORKGROUP = 1024

# ----------------------------------------------------------------------------- kernel descriptor (64 B)
# name -> (byte offset, struct format)
DESCRIPTOR = {
    "group_segment_fixed_size": (0, "<I"),
    "private_segment_fixed_size": (4, "<I"),
    "kernarg_size": (8, "<I"),
    "kernel_code_entry_byte_offset": (16, "<q"),
    "compute_pgm_rsrc3": (44, "<I"),
    "compute_pgm_rsrc1": (48, "<I"),
    "compute_pgm_rsrc2": (52, "<I"),
    "kernel_code_properties": (56, "<H"),
    "kernarg_preload": (58, "<H"),
}
DESCRIPTOR_SIZE = 64
# bit fields: name -> (lowest bit, width); per register, with the families that have each field
RSRC1 = {
    "granulated_workitem_vgpr_count": (0, 6), "granulated_wavefront_sgpr_count": (6, 4), "priority": (10, 2),
    "float_round_mode_32": (12, 2), "float_round_mode_16_64": (14, 2),
    "float_denorm_mode_32": (16, 2), "float_denorm_mode_16_64": (18, 2), "priv": (20, 1),
    "enable_dx10_clamp": (21, 1), "debug_mode": (22, 1), "enable_ieee_mode": (23, 1), "bulky": (24, 1),
    "cdbg_user": (25, 1), "fp16_ovfl": (26, 1), "wgp_mode": (29, 1), "mem_ordered": (30, 1),
    "fwd_progress": (31, 1),
}
RSRC1_ONLY = {"enable_dx10_clamp": ("rdna3", "cdna3"), "enable_ieee_mode": ("rdna3", "cdna3"),
              "wgp_mode": ("rdna3", "rdna4"), "mem_ordered": ("rdna3", "rdna4"), "fwd_progress": ("rdna3", "rdna4")}
RSRC2 = {
    "enable_private_segment": (0, 1), "user_sgpr_count": (1, 5), "enable_trap_handler": (6, 1),
    "enable_sgpr_workgroup_id_x": (7, 1), "enable_sgpr_workgroup_id_y": (8, 1), "enable_sgpr_workgroup_id_z": (9, 1),
    "enable_sgpr_workgroup_info": (10, 1), "enable_vgpr_workitem_id": (11, 2),
    "enable_exception_address_watch": (13, 1), "enable_exception_memory": (14, 1), "granulated_lds_size": (15, 9),
    "enable_exception_ieee_754_fp_invalid_operation": (24, 1), "enable_exception_fp_denormal_source": (25, 1),
    "enable_exception_ieee_754_fp_division_by_zero": (26, 1), "enable_exception_ieee_754_fp_overflow": (27, 1),
    "enable_exception_ieee_754_fp_underflow": (28, 1), "enable_exception_ieee_754_fp_inexact": (29, 1),
    "enable_exception_int_divide_by_zero": (30, 1),
}
RSRC3 = {  # per family; RDNA4's fields are not decoded (we always write 0)
    "cdna3": {"accum_offset": (0, 6), "tg_split": (16, 1)},
    "rdna3": {"shared_vgpr_count": (0, 4), "inst_pref_size": (4, 6), "trap_on_start": (10, 1),
              "trap_on_end": (11, 1), "image_op": (31, 1)},
    "rdna4": {},
}
CODE_PROPERTIES = {
    "enable_sgpr_private_segment_buffer": (0, 1), "enable_sgpr_dispatch_ptr": (1, 1),
    "enable_sgpr_queue_ptr": (2, 1), "enable_sgpr_kernarg_segment_ptr": (3, 1), "enable_sgpr_dispatch_id": (4, 1),
    "enable_sgpr_flat_scratch_init": (5, 1), "enable_sgpr_private_segment_size": (6, 1),
    "enable_wavefront_size32": (10, 1), "uses_dynamic_stack": (11, 1),
}
KERNARG_PRELOAD = {"kernarg_preload_spec_length": (0, 7), "kernarg_preload_spec_offset": (7, 9)}
FLOAT_DENORM_NONE_FLUSHED = 3   # FLOAT_DENORM_MODE_FLUSH_NONE: keep denormals (IEEE, what numpy does)
# user SGPRs in the order the hardware loads them: enable flag -> SGPR count
USER_SGPRS = {"dispatch_ptr": 2, "queue_ptr": 2, "kernarg_ptr": 2, "dispatch_id": 2}


def pack_bits(fields: dict[str, tuple[int, int]], values: dict[str, int], what: str) -> int:
    word = 0
    for name, value in values.items():
        low, width = fields[name]
        if not 0 <= value < (1 << width):
            raise ValueError(f"{what}.{name} = {value} does not fit {width} bits")
        word |= value << low
    return word


def unpack_bits(fields: dict[str, tuple[int, int]], word: int) -> dict[str, int]:
    return {name: (word >> low) & ((1 << width) - 1) for name, (low, width) in fields.items()}


def rsrc1_fields(family: str) -> dict[str, tuple[int, int]]:
    return {k: v for k, v in RSRC1.items() if family in RSRC1_ONLY.get(k, (family,))}


def pack_descriptor(fields: dict[str, int]) -> bytes:
    out = bytearray(DESCRIPTOR_SIZE)
    for name, (offset, fmt) in DESCRIPTOR.items():
        struct.pack_into(fmt, out, offset, fields.get(name, 0))
    return bytes(out)


def decode_descriptor(data: bytes, family: str) -> dict[str, Any]:
    """Every field of a 64-byte kernel descriptor; the resource words also decoded bit field by bit field."""
    if len(data) != DESCRIPTOR_SIZE:
        raise ValueError(f"a kernel descriptor is {DESCRIPTOR_SIZE} bytes, got {len(data)}")
    out: dict[str, Any] = {name: struct.unpack_from(fmt, data, offset)[0] for name, (offset, fmt) in DESCRIPTOR.items()}
    out["rsrc1"] = unpack_bits(rsrc1_fields(family), out["compute_pgm_rsrc1"])
    out["rsrc2"] = unpack_bits(RSRC2, out["compute_pgm_rsrc2"])
    out["rsrc3"] = unpack_bits(RSRC3[family], out["compute_pgm_rsrc3"])
    out["properties"] = unpack_bits(CODE_PROPERTIES, out["kernel_code_properties"])
    out["preload"] = unpack_bits(KERNARG_PRELOAD, out["kernarg_preload"])
    out["reserved_nonzero"] = any(data[12:16]) or any(data[24:44]) or any(data[60:64])
    return out


# ------------------------------------------------------------------------------------ register usage
@dataclass(frozen=True)
class RegisterUse:
    sgprs: int   # s0..s{sgprs-1} addressed by the program
    vgprs: int   # v0..v{vgprs-1}
    agprs: int   # a0..a{agprs-1} (CDNA)


def _decoded(code: Any, arch: Arch) -> tuple[bytes, list[Any]]:
    from tg_amd.assembler import assemble, decode_all
    data = bytes(code) if isinstance(code, bytes | bytearray) else assemble(code, arch)
    return data, [inst for _, inst in decode_all(data, arch)]


def register_usage(code: Any, arch: str) -> RegisterUse:
    """Highest SGPR, VGPR and AGPR (plus one) that the instructions of ``code`` name, read from the encoded bytes."""
    arch_obj = _arch(arch)
    _, insts = _decoded(code, arch_obj)
    return _scan(insts)


def _scan(insts: list[Any]) -> RegisterUse:
    from tg_amd.operands import Mod, Reg
    top = {"s": 0, "v": 0, "a": 0}
    todo = list(insts)
    while todo:
        inst = todo.pop()
        if inst.dual is not None:
            todo.append(inst.dual)
        for op in inst.operands:
            reg = op.value if isinstance(op, Mod) else op
            if isinstance(reg, Reg) and reg.kind in top:
                top[reg.kind] = max(top[reg.kind], reg.index + reg.count)
    return RegisterUse(top["s"], top["v"], top["a"])


# --------------------------------------------------------------------------------------- arguments
VALUE_KINDS = ("global_buffer", "by_value")   # what our kernels pass; others would need more metadata keys


@dataclass(frozen=True)
class KernArg:
    """One kernel argument as the metadata's ``.args`` lists it; ``offset=None`` places it after the previous."""
    name: str
    value_kind: str = "global_buffer"
    size: int = 8
    offset: int | None = None

    def metadata(self, offset: int) -> dict[str, Any]:
        out: dict[str, Any] = {".name": self.name, ".offset": offset, ".size": self.size,
                               ".value_kind": self.value_kind}
        if self.value_kind == "global_buffer":
            out[".address_space"] = "global"
        return out


def _kernarg(spec: KernArg | tuple[Any, ...] | str) -> KernArg:
    if isinstance(spec, KernArg):
        arg = spec
    elif isinstance(spec, str):
        arg = KernArg(spec)
    else:
        arg = KernArg(*spec)
    if arg.value_kind not in VALUE_KINDS:
        raise ValueError(f"kernel argument {arg.name!r}: value kind {arg.value_kind!r} not one of {VALUE_KINDS}")
    if arg.size <= 0 or (arg.value_kind == "global_buffer" and arg.size != 8):
        raise ValueError(f"kernel argument {arg.name!r}: size {arg.size} (a global buffer pointer is 8 bytes)")
    return arg


def layout_kernargs(specs: Sequence[KernArg | tuple[Any, ...] | str]) -> list[tuple[KernArg, int]]:
    """Arguments with their byte offsets: given ones kept, others aligned to their size (at most 8)."""
    out = []
    end = 0
    for spec in specs:
        arg = _kernarg(spec)
        natural = min(8, 1 << (arg.size - 1).bit_length())
        offset = arg.offset if arg.offset is not None else -(-end // natural) * natural
        if offset < 0:
            raise ValueError(f"kernel argument {arg.name!r}: negative offset {offset}")
        out.append((arg, offset))
        end = max(end, offset + arg.size)
    return out


# ---------------------------------------------------------------------------------------- the object
@dataclass(frozen=True)
class Resources:
    """Everything the descriptor and the metadata say about one kernel, checked."""
    arch: Arch
    target: Target
    wave32: bool
    next_free_sgpr: int
    vgprs: int            # architectural VGPRs
    agprs: int
    user_sgprs: int
    enables: dict[str, bool]
    workgroup_id: tuple[bool, bool, bool]
    workitem_dims: int
    kernarg_size: int
    kernarg_align: int
    lds_size: int
    scratch_size: int
    denormals: bool
    wgp_mode: bool

    @property
    def accum_offset(self) -> int:
        """First AGPR in the unified register file (CDNA): the VGPR count rounded up to 4."""
        return max(4, -(-self.vgprs // 4) * 4)

    @property
    def total_vgprs(self) -> int:
        return self.accum_offset + self.agprs if self.agprs else self.vgprs

    @property
    def sgpr_count(self) -> int:
        return self.next_free_sgpr + self.target.sgpr_extra

    @property
    def vgpr_granule(self) -> int:
        return 8 if self.arch.family == "cdna3" or self.wave32 else 4


def _granulated(count: int, granule: int) -> int:
    return max(0, -(-count // granule) - 1)


def rsrc1(res: Resources) -> int:
    family = res.arch.family
    denorm32 = FLOAT_DENORM_NONE_FLUSHED if res.denormals else 0
    values = {"granulated_workitem_vgpr_count": _granulated(res.total_vgprs, res.vgpr_granule),
              "float_denorm_mode_32": denorm32, "float_denorm_mode_16_64": FLOAT_DENORM_NONE_FLUSHED}
    if res.target.sgpr_granule:
        values["granulated_wavefront_sgpr_count"] = _granulated(res.sgpr_count, res.target.sgpr_granule)
    if family in RSRC1_ONLY["enable_ieee_mode"]:
        values |= {"enable_dx10_clamp": 1, "enable_ieee_mode": 1}
    if family in RSRC1_ONLY["wgp_mode"]:
        values |= {"wgp_mode": int(res.wgp_mode), "mem_ordered": 1}
    return pack_bits(rsrc1_fields(family), values, "compute_pgm_rsrc1")


def rsrc2(res: Resources) -> int:
    x, y, z = res.workgroup_id
    return pack_bits(RSRC2, {"enable_private_segment": int(res.scratch_size > 0), "user_sgpr_count": res.user_sgprs,
                             "enable_sgpr_workgroup_id_x": int(x), "enable_sgpr_workgroup_id_y": int(y),
                             "enable_sgpr_workgroup_id_z": int(z), "enable_vgpr_workitem_id": res.workitem_dims - 1},
                     "compute_pgm_rsrc2")


def rsrc3(res: Resources) -> int:
    if res.arch.family == "cdna3":
        return pack_bits(RSRC3["cdna3"], {"accum_offset": res.accum_offset // 4 - 1}, "compute_pgm_rsrc3")
    return 0


def code_properties(res: Resources) -> int:
    values = {f"enable_sgpr_{name}": int(on) for name, on in res.enables.items()}
    values["enable_sgpr_kernarg_segment_ptr"] = values.pop("enable_sgpr_kernarg_ptr")
    values["enable_wavefront_size32"] = int(res.wave32)
    return pack_bits(CODE_PROPERTIES, values, "kernel_code_properties")


def descriptor(res: Resources, entry_offset: int) -> bytes:
    """The 64-byte kernel descriptor; ``entry_offset`` is the code's address minus the descriptor's."""
    return pack_descriptor({
        "group_segment_fixed_size": res.lds_size, "private_segment_fixed_size": res.scratch_size,
        "kernarg_size": res.kernarg_size, "kernel_code_entry_byte_offset": entry_offset,
        "compute_pgm_rsrc3": rsrc3(res), "compute_pgm_rsrc1": rsrc1(res), "compute_pgm_rsrc2": rsrc2(res),
        "kernel_code_properties": code_properties(res),
    })


def target_id(arch: str) -> str:
    """The ``amdhsa.target`` string: no feature suffix, as xnack/sramecc are left at their defaults."""
    return f"amdgcn-amd-amdhsa--{arch}"


def metadata(name: str, res: Resources, args: list[tuple[KernArg, int]], max_workgroup_size: int) -> dict[str, Any]:
    """The NT_AMDGPU_METADATA map (code object v5) for one kernel."""
    kernel: dict[str, Any] = {
        ".name": name, ".symbol": f"{name}.kd", ".kind": "normal",
        ".args": [arg.metadata(offset) for arg, offset in args],
        ".kernarg_segment_size": res.kernarg_size, ".kernarg_segment_align": res.kernarg_align,
        ".group_segment_fixed_size": res.lds_size, ".private_segment_fixed_size": res.scratch_size,
        ".wavefront_size": 32 if res.wave32 else 64, ".sgpr_count": res.sgpr_count, ".vgpr_count": res.total_vgprs,
        ".max_flat_workgroup_size": max_workgroup_size, ".sgpr_spill_count": 0, ".vgpr_spill_count": 0,
        ".uses_dynamic_stack": False,
    }
    if res.arch.family == "cdna3":
        kernel[".agpr_count"] = res.agprs
    return {"amdhsa.version": METADATA_VERSION, "amdhsa.target": target_id(res.arch.name), "amdhsa.kernels": [kernel]}


def _arch(arch: Any) -> Arch:
    name = arch.name if isinstance(arch, Arch) else FAMILIES.get(arch, arch)
    if not isinstance(name, str) or name not in TARGETS:
        raise ValueError(f"code objects: unsupported arch {name!r}; supported: {', '.join(TARGETS)}")
    return ARCHS[name]


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or not name.isprintable() or any(c in name for c in " \0"):
        raise ValueError(f"kernel name must be a non-empty printable string without spaces, got {name!r}")
    return name


def _count(value: int | None, scanned: int, what: str, low: int, high: int, arch: str) -> int:
    count = scanned if value is None else value
    if not isinstance(count, int) or not low <= count <= high:
        raise ValueError(f"{what} = {count!r} out of range {low}..{high} on {arch}")
    if value is not None and value < scanned:
        raise ValueError(f"{what} = {value} but the code uses {scanned} on {arch}")
    return count


def resources(arch_name: str, used: RegisterUse, *, kernarg_size: int, kernarg_align: int, lds_size: int,
              scratch_size: int, vgprs: int | None, sgprs: int | None, agprs: int | None, user_sgprs: int | None,
              enables: dict[str, bool], workgroup_id: tuple[bool, bool, bool], workitem_id_dims: int,
              wave32: bool | None, denormals: bool, wgp_mode: bool) -> Resources:
    """Check the launch facts against the arch's limits and the code's registers (``ValueError`` if off)."""
    arch = _arch(arch_name)
    target = TARGETS[arch.name]
    wave32 = arch.wave == 32 if wave32 is None else bool(wave32)
    if wave32 and not arch.rdna:
        raise ValueError(f"{arch.name} runs wave64 only; wave32=True is not possible")
    wg = tuple(bool(x) for x in workgroup_id)
    if len(wg) != 3:
        raise ValueError(f"workgroup_id must be three flags (x, y, z), got {workgroup_id!r}")
    if workitem_id_dims not in (1, 2, 3):
        raise ValueError(f"workitem_id_dims must be 1, 2 or 3, got {workitem_id_dims!r}")
    enabled_user = sum(USER_SGPRS[k] for k, on in enables.items() if on)
    users = _count(user_sgprs, enabled_user, "user_sgprs", 0, MAX_USER_SGPRS, arch.name)
    system = 0 if target.system_sgprs_in_ttmp else sum(wg)
    need_sgprs = max(used.sgprs, users + system)
    if sgprs is not None and sgprs < users + system:
        raise ValueError(f"sgprs = {sgprs} but the hardware initialises {users + system} SGPRs on {arch.name}")
    nsgpr = _count(sgprs, need_sgprs, "sgprs", 0, arch.max_sgpr, arch.name)
    nvgpr = _count(vgprs, max(1, used.vgprs), "vgprs", 1, target.max_vgprs, arch.name)
    nagpr = _count(agprs, used.agprs, "agprs", 0, target.max_agprs, arch.name)
    if not isinstance(kernarg_align, int) or kernarg_align < 4 or kernarg_align & (kernarg_align - 1):
        raise ValueError(f"kernarg_align must be a power of two >= 4, got {kernarg_align!r}")
    if not isinstance(kernarg_size, int) or kernarg_size < 0 or kernarg_size % kernarg_align:
        raise ValueError(f"kernarg_size {kernarg_size!r} must be a non-negative multiple of the "
                         f"kernarg alignment {kernarg_align}")
    if not isinstance(lds_size, int) or not 0 <= lds_size <= MAX_LDS:
        raise ValueError(f"lds_size {lds_size!r} out of range 0..{MAX_LDS} on {arch.name}")
    if not isinstance(scratch_size, int) or scratch_size < 0:
        raise ValueError(f"scratch_size {scratch_size!r} must be a non-negative int")
    return Resources(arch, target, wave32, nsgpr, nvgpr, nagpr, users, dict(enables), (wg[0], wg[1], wg[2]),
                     workitem_id_dims, kernarg_size, kernarg_align, lds_size, scratch_size, denormals, wgp_mode)


def code_object(name: str, code: Any, arch: str, *, kernarg_size: int | None = None,
                kernargs: Sequence[KernArg | tuple[Any, ...] | str] = (), kernarg_align: int = 8,
                lds_size: int = 0, scratch_size: int = 0, vgprs: int | None = None, sgprs: int | None = None,
                agprs: int | None = None, user_sgprs: int | None = None, kernarg_ptr: bool = True,
                dispatch_ptr: bool = False, queue_ptr: bool = False, dispatch_id: bool = False,
                workgroup_id: tuple[bool, bool, bool] = (True, False, False), workitem_id_dims: int = 1,
                wave32: bool | None = None, max_workgroup_size: int = MAX_WORKGROUP, denormals: bool = True,
                wgp_mode: bool = True) -> bytes:
    """An AMDHSA code object (ELF shared object) holding one kernel; see the module docstring.

    ``code``: machine code bytes, LLVM-syntax text, or a list of DSL instructions and labels.
    ``kernarg_size``: bytes of the kernarg segment (default: the end of ``kernargs``, aligned).
    ``kernargs``: ``KernArg``s, names (8-byte global buffers) or ``(name, value_kind, size[, offset])``.
    ``vgprs``/``sgprs``/``agprs``: registers to allocate (default: what the code uses); ``sgprs``
    counts s0..s{n-1} only -- the arch's reserved extras (VCC, and FLAT_SCRATCH/XNACK_MASK on gfx942)
    are added as LLVM does. ``user_sgprs``: default the enabled pointers, in hardware order
    dispatch_ptr, queue_ptr, kernarg_ptr, dispatch_id (2 SGPRs each). ``workgroup_id``: which
    workgroup ids the hardware writes (after the user SGPRs; in TTMP registers on gfx12).
    ``wave32``: default the arch's wave size (RDNA 32, gfx942 64). ``denormals``: keep f32
    denormals (f16/f64 always keep them). Raises ``ValueError`` on anything the arch cannot run.
    """
    name = _check_name(name)
    arch_obj = _arch(arch)
    data, insts = _decoded(code, arch_obj)
    if not data:
        raise ValueError(f"kernel {name!r} has no code")
    args = layout_kernargs(kernargs)
    names = [arg.name for arg, _ in args]
    if len(set(names)) != len(names):
        raise ValueError(f"kernel {name!r}: argument names repeat: {names}")
    args_end = max((offset + arg.size for arg, offset in args), default=0)
    if kernarg_size is None:
        kernarg_size = -(-args_end // kernarg_align) * kernarg_align if isinstance(kernarg_align, int) else 0
    if isinstance(kernarg_size, int) and args_end > kernarg_size:
        raise ValueError(f"kernel {name!r}: arguments end at byte {args_end}, after kernarg_size {kernarg_size}")
    if not isinstance(max_workgroup_size, int) or not 1 <= max_workgroup_size <= MAX_WORKGROUP:
        raise ValueError(f"max_workgroup_size {max_workgroup_size!r} out of range 1..{MAX_WORKGROUP}")
    enables = {"dispatch_ptr": dispatch_ptr, "queue_ptr": queue_ptr, "kernarg_ptr": kernarg_ptr,
               "dispatch_id": dispatch_id}
    res = resources(arch_obj.name, _scan(insts), kernarg_size=kernarg_size, kernarg_align=kernarg_align,
                    lds_size=lds_size, scratch_size=scratch_size, vgprs=vgprs, sgprs=sgprs, agprs=agprs,
                    user_sgprs=user_sgprs, enables=enables, workgroup_id=workgroup_id,
                    workitem_id_dims=workitem_id_dims, wave32=wave32, denormals=denormals, wgp_mode=wgp_mode)
    note = elf.note("AMDGPU", NT_AMDGPU_METADATA, msgpack.pack(metadata(name, res, args, max_workgroup_size)))
    return _link(name, data, res, note)


def _link(name: str, code: bytes, res: Resources, note: bytes) -> bytes:
    """Lay out the shared object: R (note, dynsym, hash, dynstr, descriptor), RX (text), RW (dynamic)."""
    symbols = [
        elf.Symbol(name, ".text", lambda s: s[".text"].addr, len(code), elf.STT_FUNC, other=elf.STV_PROTECTED),
        elf.Symbol(f"{name}.kd", ".rodata", lambda s: s[".rodata"].addr, DESCRIPTOR_SIZE, elf.STT_OBJECT),
    ]  # visibilities as LLVM sets them: the code symbol protected (the descriptor points at it), the descriptor default
    dynstr, strtab = elf.StringTable(), elf.StringTable()
    for sym in symbols:
        dynstr.add(sym.name)
        strtab.add(sym.name)
    nsym = len(symbols) + 1
    hash_bytes = elf.hash_table([""] + [sym.name for sym in symbols])
    A, AX, WA = elf.SHF_ALLOC, elf.SHF_ALLOC | elf.SHF_EXECINSTR, elf.SHF_ALLOC | elf.SHF_WRITE
    index: dict[str, int] = {}

    def dynamic(s: dict[str, elf.Section]) -> bytes:
        entries = [(elf.DT_HASH, s[".hash"].addr), (elf.DT_SYMTAB, s[".dynsym"].addr),
                   (elf.DT_SYMENT, elf.SYM.size), (elf.DT_STRTAB, s[".dynstr"].addr),
                   (elf.DT_STRSZ, len(dynstr.data)), (elf.DT_NULL, 0)]
        return b"".join(elf.DYN.pack(tag, value) for tag, value in entries)

    loaded = [
        elf.Section(".note", elf.SHT_NOTE, A, len(note), lambda s: note, 4, segment="R"),
        elf.Section(".dynsym", elf.SHT_DYNSYM, A, nsym * elf.SYM.size,
                    lambda s: elf.symbol_table(symbols, dynstr, index, s), 8, elf.SYM.size, ".dynstr", 1, "R"),
        elf.Section(".hash", elf.SHT_HASH, A, len(hash_bytes), lambda s: hash_bytes, 4, 4, ".dynsym", segment="R"),
        elf.Section(".dynstr", elf.SHT_STRTAB, A, len(dynstr.data), lambda s: bytes(dynstr.data), 1, segment="R"),
        elf.Section(".rodata", elf.SHT_PROGBITS, A, DESCRIPTOR_SIZE,
                    lambda s: descriptor(res, s[".text"].addr - s[".rodata"].addr), 64, segment="R"),
        elf.Section(".text", elf.SHT_PROGBITS, AX, len(code), lambda s: code, 256, segment="RX"),
        elf.Section(".dynamic", elf.SHT_DYNAMIC, WA, 6 * elf.DYN.size, dynamic, 8, elf.DYN.size, ".dynstr",
                    segment="RW"),
    ]
    unloaded = [
        elf.Section(".symtab", elf.SHT_SYMTAB, 0, nsym * elf.SYM.size,
                    lambda s: elf.symbol_table(symbols, strtab, index, s), 8, elf.SYM.size, ".strtab", 1),
        elf.Section(".strtab", elf.SHT_STRTAB, 0, len(strtab.data), lambda s: bytes(strtab.data), 1),
    ]
    index.update({sec.name: i + 1 for i, sec in enumerate(loaded + unloaded)})
    ident = elf.Identity(ELFOSABI_AMDGPU_HSA, ELFABIVERSION_AMDGPU_HSA_V5, EM_AMDGPU,
                         res.target.mach | res.target.features)
    return elf.link(ident, loaded, unloaded)


# ------------------------------------------------------------------------------------------ reading
def read_code_object(data: bytes) -> dict[str, Any]:
    """Decode an AMDHSA code object (ours, or any with ``name``/``name.kd`` symbols); see module docstring.

    Out: ``{"arch", "e_flags", "xnack", "sramecc", "abi_version", "metadata", "kernels": {name: {"code",
    "code_address", "descriptor_address", "descriptor" (decoded fields), "metadata"}}}``.
    """
    f = elf.read_elf(data)
    if f.machine != EM_AMDGPU or f.osabi != ELFOSABI_AMDGPU_HSA:
        raise ValueError(f"not an AMDHSA code object (e_machine {f.machine}, OS ABI {f.osabi})")
    mach = f.flags & 0xFF
    if mach not in MACH_NAMES:
        raise ValueError(f"code object for an unsupported processor (EF_AMDGPU_MACH {mach:#x})")
    arch = MACH_NAMES[mach]
    meta: dict[str, Any] = {}
    for owner, kind, payload in f.notes:
        if owner == "AMDGPU" and kind == NT_AMDGPU_METADATA:
            meta = msgpack.unpack(payload)
    kernels_meta = meta.get("amdhsa.kernels", []) if isinstance(meta, dict) else None
    if not isinstance(kernels_meta, list) or not all(isinstance(k, dict) for k in kernels_meta):
        raise ValueError("the AMDGPU metadata note is not a map with a list of kernel maps")
    kernel_meta = {k.get(".name"): k for k in kernels_meta}
    symbols = {s.name: s for s in f.symbols.get(".symtab", f.symbols.get(".dynsym", []))}
    kernels = {}
    for sym_name, kd in symbols.items():
        if not sym_name.endswith(".kd") or kd.size != DESCRIPTOR_SIZE:
            continue
        name = sym_name[:-3]
        desc = decode_descriptor(f.bytes_at(kd.value, DESCRIPTOR_SIZE), ARCHS[arch].family)
        entry = kd.value + desc["kernel_code_entry_byte_offset"]
        size = symbols[name].size if name in symbols else 0
        kernels[name] = {"code": f.bytes_at(entry, size), "code_address": entry, "descriptor_address": kd.value,
                         "descriptor": desc, "metadata": kernel_meta.get(name, {})}
    return {"arch": arch, "e_flags": f.flags, "abi_version": f.abiversion,
            "xnack": FEATURE_NAMES[(f.flags >> 8) & 3], "sramecc": FEATURE_NAMES[(f.flags >> 10) & 3],
            "metadata": meta, "kernels": kernels}
