"""Tensor.custom_kernel: hand-written machine instructions scheduled like any other kernel.

The device here is a toy "lane machine" registered through the public hooks, as a backend plugin
would: its renderer encodes INS uops to bytes and its program decodes the bytes and runs them, one
numpy operation per instruction over all threads of the launch. Nothing in core knows the ISA.
"""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

import tgcore
from tgcore.custom import custom_program, is_custom_program
from tgcore.dtype import dtypes
from tgcore.engine.stats import GlobalCounters
from tgcore.plugins.manager import PluginHost, module_plugin, set_host
from tgcore.renderer.python import PythonRenderer
from tgcore.runtime.cpu import CPUAllocator
from tgcore.runtime.device import Device
from tgcore.runtime.python import PythonProgram, _as_array
from tgcore.runtime.registry import close_devices
from tgcore.tensor import Tensor
from tgcore.uop import UOp

# -- the toy ISA: 8 bytes per instruction (opcode, dst, a, b, float32 immediate); registers hold one
#    float per thread; thread id t = global_id * local_threads + local_id over the whole launch
OPCODES = {"ld": 1, "st": 2, "add": 3, "mul": 4, "muli": 5, "end": 6}
NAMES = {v: k for k, v in OPCODES.items()}


def encode(ins: tuple) -> bytes:
    op, d, a, b, imm = (*ins, 0, 0, 0, 0.0)[:5]
    return struct.pack("<BBBBf", OPCODES[op], d, a, b, imm)


MAGIC = b"LANE"


class LaneRenderer(PythonRenderer):
    """Ordinary kernels go to the core's interpreter; custom kernels are encoded lane-machine code."""
    device, name, custom_kernels = "LANE", "ISA", True

    def render(self, name, kernel):
        if is_custom_program(kernel):
            return MAGIC + b"".join(encode(u.arg) for u in kernel.src)
        return super().render(name, kernel)


class LaneProgram:
    def __init__(self, name, lib):
        self.interpreted = None if lib.startswith(MAGIC) else PythonProgram(name, lib)
        self.code = [] if self.interpreted else [struct.unpack_from("<BBBBf", lib, i)
                                                 for i in range(len(MAGIC), len(lib), 8)]

    def __call__(self, *bufs, vals=(), threads=1, wait=False, global_size=None, local_size=None):
        if self.interpreted is not None:
            assert global_size is None, "ordinary kernels get no launch dimensions"
            return self.interpreted(*bufs, vals=vals, threads=threads, wait=wait)
        assert global_size is not None and local_size is not None, "launch dimensions are bound by the engine"
        n = math.prod(global_size) * math.prod(local_size)
        mem = [_as_array(h, dtypes.float32.ptr()) for h in bufs]
        regs = np.zeros((8, n), np.float32)
        for op, d, a, b, imm in self.code:
            name = NAMES[op]
            if name == "ld":
                regs[d] = mem[a][:n]
            elif name == "st":
                mem[a][:n] = regs[d]
            elif name == "add":
                regs[d] = regs[a] + regs[b]
            elif name == "mul":
                regs[d] = regs[a] * regs[b]
            elif name == "muli":
                regs[d] = regs[a] * np.float32(imm)
            elif name == "end":
                break
        return 0.0 if wait else None


class LaneDevice(Device):
    def __init__(self, name="LANE", variant=None):
        super().__init__(name, variant, allocator=CPUAllocator(), program=LaneProgram)
        self.threads = 1


@pytest.fixture(autouse=True)
def lane_device():
    def devices(register):
        register("LANE", LaneDevice, "toy lane machine for custom-kernel tests")

    def renderers(register):
        register("LANE", "ISA", LaneRenderer, "toy ISA")

    dist = type("Dist", (), {"name": "tg-lane", "version": "1.0"})()
    ep = type("EP", (), {"name": "lane", "dist": dist, "load": lambda self: plugin})()
    plugin = module_plugin("tg_lane", tg_register_devices=devices, tg_register_renderers=renderers)
    previous = set_host(PluginHost(entry_points=[ep], env={}))
    close_devices()
    yield
    set_host(previous)
    close_devices()


def saxpy(scale: float):
    """out = a * scale + b, one thread per element (64 threads per workgroup)."""
    def build(out, a, b):
        n = out.dtype.size
        ins = [("ld", 0, 1), ("ld", 1, 2), ("muli", 0, 0, 0, scale), ("add", 0, 0, 1), ("st", 0, 0), ("end",)]
        return custom_program(f"saxpy_{n}", ins, global_size=(n // 64,), local_size=(64,), ops=2 * n, mem=12 * n)
    return build


def test_custom_kernel_runs_and_feeds_later_kernels():
    x, y = np.arange(256, dtype=np.float32), np.linspace(-1, 1, 256, dtype=np.float32)
    a = Tensor(x, device="LANE") + 1  # lazy inputs are realized into buffers first
    b = Tensor(y, device="LANE")
    out, a_after, b_after = Tensor.custom_kernel(Tensor.empty(256, device="LANE"), a, b, fxn=saxpy(3.0))
    assert out.shape == (256,) and out.dtype == dtypes.float32
    np.testing.assert_array_equal(out.numpy(), (x + 1) * 3 + y)
    np.testing.assert_array_equal((out * 2 - a_after).numpy(), ((x + 1) * 3 + y) * 2 - (x + 1))
    np.testing.assert_array_equal(b_after.numpy(), y)


def test_custom_kernel_counts_its_estimates():
    a, b = Tensor.ones(128, device="LANE").contiguous(), Tensor.ones(128, device="LANE").contiguous()
    a.realize(b)
    GlobalCounters.reset()
    out = Tensor.custom_kernel(Tensor.empty(128, device="LANE"), a, b, fxn=saxpy(1.0))[0].realize()
    assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops == 256
    assert out.tolist() == [2.0] * 128


def test_custom_kernel_writes_in_place_and_clears_stale_values():
    buf = Tensor.ones(64, device="LANE").contiguous().realize()
    keep = buf * 2  # keeps the lazy node alive: the realized-value cache remembers its result below
    assert (buf * 2).tolist() == [2.0] * 64
    (written,) = Tensor.custom_kernel(buf, fxn=lambda o: custom_program(
        "triple", [("ld", 0, 0), ("muli", 0, 0, 0, 3.0), ("st", 0, 0)], (1,), (64,)))
    assert written.tolist() == [3.0] * 64
    assert buf.tolist() == [3.0] * 64  # the kernel wrote the input's own buffer
    assert keep.tolist() == [6.0] * 64  # recomputed from the new contents, not the cached 2.0


def test_gradients_come_from_grad_fxn():
    a = Tensor(np.arange(128, dtype=np.float32), device="LANE", requires_grad=True)
    b = Tensor(np.ones(128, dtype=np.float32), device="LANE", requires_grad=True)

    def grad(g, index, out, a_in, b_in):
        assert index == 0
        return None, g * 5.0, g

    out = Tensor.custom_kernel(Tensor.empty(128, device="LANE"), a, b, fxn=saxpy(5.0), grad_fxn=grad)[0]
    (out * out).sum().backward()
    expected = (np.arange(128) * 5 + 1).astype(np.float32)
    np.testing.assert_allclose(a.grad.numpy(), 2 * expected * 5)
    np.testing.assert_allclose(b.grad.numpy(), 2 * expected)


def test_missing_grad_fxn_is_a_clear_error():
    a = Tensor(np.ones(64, dtype=np.float32), device="LANE", requires_grad=True)
    out = Tensor.custom_kernel(Tensor.empty(64, device="LANE"), a, a, fxn=saxpy(1.0))[0]
    with pytest.raises(NotImplementedError, match="no grad_fxn"):
        out.sum().backward()


def test_jit_replays_custom_kernels():
    @tgcore.jit
    def step(a, b):
        return (Tensor.custom_kernel(Tensor.empty(64, device="LANE"), a, b, fxn=saxpy(2.0))[0] + 1).realize()

    for i in range(4):
        a = Tensor(np.full(64, i, np.float32), device="LANE").realize()
        b = Tensor(np.ones(64, np.float32), device="LANE").realize()
        assert step(a, b).tolist() == [2.0 * i + 2.0] * 64


def test_bad_builders_and_launches():
    a = Tensor.ones(64, device="LANE")
    with pytest.raises(TypeError, match="must return custom_program"):
        Tensor.custom_kernel(a, fxn=lambda p: "nope")[0].realize()
    with pytest.raises(ValueError, match="global_size"):
        custom_program("k", [("end",)], global_size=(0,))
    with pytest.raises(ValueError, match="no instructions"):
        custom_program("k", [])
    with pytest.raises(ValueError, match="identifier"):
        custom_program("bad name", [("end",)])
    with pytest.raises(ValueError, match="instructions must be INS"):
        custom_program("k", [UOp.const(dtypes.int32, 1)])
    with pytest.raises(ValueError, match="one device"):
        Tensor.custom_kernel(a, Tensor.ones(64, device="PYTHON"), fxn=saxpy(1.0))
    with pytest.raises(ValueError, match="at least one"):
        Tensor.custom_kernel(fxn=saxpy(1.0))


def test_renderers_without_custom_kernels_refuse():
    a = Tensor.ones(64, device="PYTHON")
    with pytest.raises(NotImplementedError, match="cannot run hand-written kernels"):
        Tensor.custom_kernel(a, fxn=lambda o: custom_program("k", [("end",)]))[0].realize()
