"""The AMD device as tgcore sees it: registered through the plugin hooks, ``AMD:EMU`` usable from Tensor
code and ``DEV``, the hardware reported unavailable, custom kernels run by the emulator from their bytes."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tg_amd
from tg_amd.device import AmdIns
from tg_amd.gemm import kernel_instructions

from tgcore.custom import custom_program
from tgcore.runtime.registry import DeviceError, close_devices
from tgcore.tensor import Tensor

NO_KFD = not os.path.exists("/dev/kfd")


@pytest.fixture(autouse=True)
def fresh_devices():
    close_devices()
    yield
    close_devices()


def test_tg_devices_lists_amd():
    out = subprocess.run([sys.executable, "-m", "tgcore.cli", "devices"], capture_output=True, text=True,
                         check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("AMD "))
    assert "EMU*" in row and "HW (unavailable: no /dev/kfd" in row and "amd" in row


def test_ordinary_kernels_run_on_amd_emu():
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    t = Tensor(x, device="AMD:EMU")
    out = ((t @ t.T).exp2().sum(1) + t.max(1)).numpy()
    np.testing.assert_allclose(out, np.exp2(x @ x.T).sum(1) + x.max(1), rtol=1e-6)
    assert t.device == "AMD:EMU"


def test_dev_environment_variable_selects_amd_emu():
    code = ("import numpy as np; from tgcore.tensor import Tensor; t = Tensor(np.arange(4, dtype=np.float32)); "
            "print(t.device, (t * 3 + 1).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "DEV": "AMD:EMU"}).stdout
    assert out.strip() == "AMD:EMU [1.0, 4.0, 7.0, 10.0]"


@pytest.mark.skipif(not NO_KFD, reason="this machine has /dev/kfd")
def test_amd_hardware_is_unavailable_without_kfd():
    with pytest.raises(DeviceError, match="unavailable.*no /dev/kfd.*AMD:EMU"):
        Tensor([1.0, 2.0], device="AMD").realize()
    with pytest.raises(DeviceError, match="AMD:HW is unavailable here: no /dev/kfd"):
        Tensor([1.0, 2.0], device="AMD:HW").realize()


def _copy_kernel(arch: str) -> list[AmdIns]:
    """out[i] = in[i] * 2 + 1 over 256 uint32s: 4 workgroups of 64 threads."""
    km = "s_wait_kmcnt 0" if arch == "gfx1200" else "s_waitcnt lgkmcnt(0)"
    vm = "s_wait_loadcnt 0" if arch == "gfx1200" else "s_waitcnt vmcnt(0)"
    gid = "ttmp9" if arch == "gfx1200" else "s2"
    src = f"""
    s_load_b128 s[4:7], s[0:1], 0x0
    s_lshl_b32 s8, {gid}, 8
    v_lshl_add_u32 v1, v0, 2, s8
    {km}
    global_load_b32 v2, v1, s[6:7]
    {vm}
    v_lshl_add_u32 v2, v2, 1, 1
    global_store_b32 v1, v2, s[4:5]
    s_endpgm
    """
    return list(kernel_instructions(tg_amd.assemble(src, arch), arch))


@pytest.mark.parametrize("arch", ["gfx1200", "gfx1100"])
def test_custom_kernel_runs_machine_code_in_the_emulator(arch):
    data = np.arange(256, dtype=np.uint32) * 7
    inp = Tensor(data, device="AMD:EMU")
    out = Tensor.empty(256, dtype="uint32", device="AMD:EMU")
    ins = _copy_kernel(arch)
    res = Tensor.custom_kernel(out, inp, fxn=lambda o, i: custom_program("twice_plus_one", ins, (4,), (64,)))[0]
    assert res.numpy().tolist() == (data * 2 + 1).tolist()


def test_custom_kernel_instructions_must_be_amd():
    out = Tensor.empty(64, device="AMD:EMU")
    with pytest.raises(TypeError, match="INS args must be tg_amd.device.AmdIns"):
        Tensor.custom_kernel(out, fxn=lambda o: custom_program("bad", [("not", "amd")], (1,), (64,)))[0].realize()
    ins = [AmdIns("gfx942", tg_amd.assemble("s_endpgm", "gfx942"))]
    with pytest.raises(ValueError, match="is for gfx942"):
        Tensor.custom_kernel(out, fxn=lambda o: custom_program("cdna", ins, (1,), (64,)))[0].realize()


def test_custom_kernels_become_code_objects():
    """What the AMD:EMU renderer hands the loader is an AMDHSA code object with the kernel's facts."""
    from dataclasses import replace

    from tg_amd.codeobj import read_code_object
    from tg_amd.device import AmdKernel, EmuRenderer
    ins = [AmdKernel(8192, (True, False, False)), *_copy_kernel("gfx1100")]
    sink = custom_program("twice_plus_one", ins, (4,), (64,))
    lib = EmuRenderer().render("twice_plus_one", sink.replace(arg=replace(sink.arg, n_args=2)))
    info = read_code_object(lib)
    kernel = info["kernels"]["twice_plus_one"]
    assert info["arch"] == "gfx1100" and kernel["descriptor"]["group_segment_fixed_size"] == 8192
    assert [arg[".name"] for arg in kernel["metadata"][".args"]] == ["arg0", "arg1"]
    assert kernel["code"] == b"".join(i.code for i in ins[1:])
