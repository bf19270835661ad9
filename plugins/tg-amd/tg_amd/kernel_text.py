"""A whole kernel in LLVM syntax -> an AMDHSA code object: ``kernel_object(source, arch) -> bytes``.

In: the source llvm-mc assembles -- the kernel's code after its label (``.text``, ``.globl``,
``.p2align``, ``.type`` and ``.amdgcn_target``/``.amdhsa_code_object_version`` lines allowed) and one
``.amdhsa_kernel NAME`` ... ``.end_amdhsa_kernel`` block. Out: ``tg_amd.code_object(NAME, code, arch,
...)`` with the block's directives as its arguments (``.amdhsa_next_free_vgpr`` -> ``vgprs``, ...).
Directives that describe what ``code_object`` derives itself (``.amdhsa_enable_private_segment``)
or fixes (``.amdhsa_float_denorm_mode_16_64 3``) are checked against it; anything else is refused.
"""
from __future__ import annotations

import re
from typing import Any

from tg_amd.arch import AsmError, get_arch

# directive -> (code_object argument, how the directive's number becomes it)
ARGUMENTS: dict[str, tuple[str, Any]] = {
    "group_segment_fixed_size": ("lds_size", int),
    "private_segment_fixed_size": ("scratch_size", int),
    "kernarg_size": ("kernarg_size", int),
    "next_free_vgpr": ("vgprs", int),
    "next_free_sgpr": ("sgprs", int),
    "user_sgpr_count": ("user_sgprs", int),
    "user_sgpr_kernarg_segment_ptr": ("kernarg_ptr", bool),
    "user_sgpr_dispatch_ptr": ("dispatch_ptr", bool),
    "user_sgpr_queue_ptr": ("queue_ptr", bool),
    "user_sgpr_dispatch_id": ("dispatch_id", bool),
    "system_vgpr_workitem_id": ("workitem_id_dims", lambda v: v + 1),
    "wavefront_size32": ("wave32", bool),
    "workgroup_processor_mode": ("wgp_mode", bool),
    "float_denorm_mode_32": ("denormals", lambda v: v == 3),
}
WORKGROUP_IDS = ("system_sgpr_workgroup_id_x", "system_sgpr_workgroup_id_y", "system_sgpr_workgroup_id_z")
# directives whose value code_object fixes: the only value accepted
FIXED = {"float_denorm_mode_16_64": 3}
SKIPPED = (".text", ".globl", ".p2align", ".type", ".amdgcn_target", ".amdhsa_code_object_version", ".rodata",
           ".section", ".size")
DIRECTIVE_RE = re.compile(r"^\.amdhsa_(\w+)\s+(\S+)$")


def kernel_object(source: str, arch: str) -> bytes:
    """The code object of the one kernel in ``source`` (see the module docstring)."""
    from tg_amd.codeobj import code_object
    arch_obj = get_arch(arch)
    code: list[str] = []
    directives: dict[str, int] = {}
    name = None
    inside = False
    for n, raw in enumerate(source.splitlines(), 1):
        line = raw.split("//", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith(".amdhsa_kernel"):
            if name is not None:
                raise AsmError("one .amdhsa_kernel block per source", None, None, arch, n)
            name, inside = line.split(maxsplit=1)[1].strip(), True
        elif line == ".end_amdhsa_kernel":
            inside = False
        elif inside:
            m = DIRECTIVE_RE.match(line)
            if not m:
                raise AsmError(f"not an .amdhsa_ directive: {line!r}", None, None, arch, n)
            directives[m.group(1)] = int(m.group(2), 0)
        elif line.startswith(SKIPPED):
            continue
        else:
            code.append(raw)
    if name is None:
        raise AsmError("no .amdhsa_kernel block", None, None, arch)
    kwargs: dict[str, Any] = {}
    workgroup = [True, False, False]
    for key, value in directives.items():
        if key in ARGUMENTS:
            arg, convert = ARGUMENTS[key]
            kwargs[arg] = convert(value)
        elif key in WORKGROUP_IDS:
            workgroup[WORKGROUP_IDS.index(key)] = bool(value)
        elif key == "enable_private_segment":
            if bool(value) != (directives.get("private_segment_fixed_size", 0) > 0):
                raise AsmError(".amdhsa_enable_private_segment must say whether there is scratch", None, None, arch)
        elif key == "accum_offset":
            continue  # gfx942: read with next_free_vgpr below
        elif FIXED.get(key) != value:
            raise AsmError(f"directive .amdhsa_{key} {value} is not supported", None, None, arch)
    kwargs["workgroup_id"] = tuple(workgroup)
    if "accum_offset" in directives and not arch_obj.rdna:  # VGPRs before the offset, AGPRs after it
        total = kwargs.pop("vgprs", directives["accum_offset"])
        kwargs["vgprs"] = directives["accum_offset"]
        kwargs["agprs"] = max(0, total - directives["accum_offset"])
    return code_object(name, "\n".join(code), arch, **kwargs)
