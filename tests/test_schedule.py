"""Scheduler behaviour: fusion (kernel counts), views instead of copies, memory, DEBUG output."""
from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from tgcore.engine.stats import GlobalCounters
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor


def kernels(*tensors: Tensor) -> list[str]:
    items, _ = create_schedule([t.uop for t in tensors], tensors[0].device)
    return [si.kind for si in items]


def test_elementwise_chain_into_reduce_is_one_kernel():
    a, b, c = (Tensor(np.ones(16, np.float32) * i) for i in (1, 2, 3))
    assert kernels(((a + b) * c).sum()) == ["reduce"]
    assert ((a + b) * c).sum().item() == 144.0


def test_reduce_with_elementwise_output_is_one_kernel():
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert kernels((a * 2).sum(1).sqrt() + 1) == ["reduce"]


def test_reshape_of_contiguous_buffer_makes_no_kernel():
    a = Tensor(np.arange(12, dtype=np.float32))
    assert kernels(a.reshape(3, 4)) == []
    assert kernels(a.reshape(3, 4).shrink(((1, 2), None))) == []  # a row is a slice: a view
    assert kernels(a.reshape(3, 4).contiguous()) == ["elementwise"]  # a copy of its own (assign into it, or a)


def test_a_reshape_or_slice_of_a_contiguous_result_is_a_view_of_its_buffer():
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert kernels((a * 2).contiguous().reshape(2, 6)) == ["elementwise"]
    assert kernels((a * 2).contiguous().contiguous()) == ["elementwise"]
    row = (a * 2).contiguous().shrink(((1, 2), None))
    assert kernels(row) == ["elementwise"]
    np.testing.assert_array_equal(row.numpy(), [[8, 10, 12, 14]])
    np.testing.assert_array_equal((a * 2).contiguous().reshape(2, 6).numpy(), np.arange(12).reshape(2, 6) * 2)
    assert kernels((a * 2).contiguous().permute(1, 0)) == ["elementwise", "elementwise"]  # a transposed copy


def test_a_value_realized_for_a_matmul_is_read_by_its_other_users():
    """relu(h + b) gets a kernel of its own before a wide matmul (which reads it through a reshape); the column
    sums read that buffer too, instead of computing relu(h + b) again from h."""
    rng = np.random.default_rng(0)
    h, b, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 16), (16,), (16, 128)))
    th = Tensor(h)
    act = (th + Tensor(b)).relu()
    out, sums = act @ Tensor(w), act.sum(0)
    items, _ = create_schedule([out.uop, sums.uop], out.device)
    assert [si.kind for si in items] == ["elementwise", "reduce", "reduce"]
    assert sum(any(buf is th.uop.src[0] for buf in si.buf_uops) for si in items) == 1  # only relu's kernel reads h
    Tensor.realize(out, sums)
    np.testing.assert_allclose(out.numpy(), np.maximum(h + b, 0) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sums.numpy(), np.maximum(h + b, 0).sum(0), rtol=1e-5, atol=1e-5)


def test_contiguous_of_a_permuted_view_copies():
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert kernels(a.permute(1, 0).contiguous()) == ["elementwise"]
    np.testing.assert_array_equal(a.permute(1, 0).contiguous().numpy(), np.arange(12).reshape(3, 4).T)


def test_a_padded_read_is_one_gated_load_without_a_select():
    """A pad of a pad (a convolution's padded input with slack rows) reads each element with one load gated on both
    paddings, which reads 0 where the gate is false: no select between the load and 0.0 is left around it."""
    from tgcore.uop import Ops
    x_np = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    out = Tensor(x_np).pad(((1, 1), (1, 1))).pad(((0, 2), None))
    (item,) = create_schedule([out.uop], "CPU")[0]
    ops = [u.op for u in item.ast.toposort]
    assert Ops.WHERE not in ops and ops.count(Ops.LOAD) == 1
    np.testing.assert_array_equal(out.numpy(), np.pad(np.pad(x_np, 1), ((0, 2), (0, 0))))


def test_reduce_consumed_by_broadcast_gets_its_own_kernel():
    x = Tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    out = x - x.max(1, keepdim=True).expand(4, 8)
    assert kernels(out) == ["reduce", "elementwise"]


def test_a_concatenation_of_products_computes_each_product_once():
    """cat(x @ A.T, x @ B.T): each product in a kernel of its own (a matrix product the policy tiles), the
    concatenation a copy; fused into it, both reductions would run at every output of the concatenation."""
    rng = np.random.default_rng(3)
    x_np, a_np, b_np = (rng.integers(-3, 4, s).astype(np.float32) for s in ((9, 20), (12, 20), (7, 20)))
    x, a, b = Tensor(x_np), Tensor(a_np), Tensor(b_np)
    out = Tensor.cat(x @ a.T, x @ b.T, dim=1)
    assert sorted(kernels(out)) == ["elementwise", "reduce", "reduce"]
    np.testing.assert_array_equal(out.numpy(), np.concatenate([x_np @ a_np.T, x_np @ b_np.T], axis=1))


def test_cheap_elementwise_input_read_many_times_by_a_matmul_gets_a_kernel():
    """relu(h + b) (3 ALU ops on 2 buffers) read by every one of 128 output columns is computed once, not 128
    times; the same work read by 8 output columns stays fused into the matmul, and so does h + 1 (one op on one
    buffer: a load of the result would save nothing)."""
    rng = np.random.default_rng(0)
    h, b = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    act = (Tensor(h) + Tensor(b)).relu()
    for cols, kinds in ((128, ["elementwise", "reduce"]), (8, ["reduce"])):
        w = rng.standard_normal((16, cols)).astype(np.float32)
        out = act @ Tensor(w)
        assert kernels(out) == kinds
        np.testing.assert_allclose(out.numpy(), np.maximum(h + b, 0) @ w, rtol=1e-5, atol=1e-5)
    w = rng.standard_normal((16, 128)).astype(np.float32)
    assert kernels((Tensor(h) + 1) @ Tensor(w)) == ["reduce"]


def test_bytes_widened_for_an_integer_product_stay_fused_at_any_broadcast():
    """Five-bit values unpacked from two byte buffers (6 ALU ops on 2 buffers: worth a kernel as floats) and widened
    to int32 for an integer product stay fused into it when 128 activation rows broadcast them (a byte dot's
    operand: its kernel must not change with the number of rows, batch invariance); as floats they get a kernel."""
    rng = np.random.default_rng(1)
    q, h = (rng.integers(0, 256, (16, 64), dtype=np.uint8) for _ in range(2))
    x = rng.integers(-128, 128, (128, 64), dtype=np.int8)
    five = ((Tensor(q) >> 4) & 15) | (((Tensor(h) >> 3) & 1) << 4)
    expected = (((q >> 4) & 15) | (((h >> 3) & 1) << 4)).astype(np.int64)
    for rows in (1, 128):
        out = (Tensor(x[:rows]).cast("int32").reshape(rows, 1, 64) * five.cast("int32")).sum(-1)
        assert kernels(out) == ["reduce"]
        np.testing.assert_array_equal(out.numpy(), x[:rows].astype(np.int64) @ expected.T)
    floats = (Tensor(x).cast("float32").reshape(128, 1, 64) * five.cast("float32")).sum(-1)
    assert kernels(floats) == ["elementwise", "reduce"]
    np.testing.assert_allclose(floats.numpy(), x.astype(np.float64) @ expected.T, rtol=1e-6)
    # float work rounded to bytes is no unpacked weight: recomputed for each of 128 rows it cost 70x (review)
    f = rng.standard_normal((16, 64)).astype(np.float32)
    rounded = ((Tensor(f).exp() * 10.0 / (Tensor(f).abs() + 1.0)).sqrt() * 3.0 + 0.5).cast("int8")
    out = (Tensor(x).cast("int32").reshape(128, 1, 64) * rounded.cast("int32")).sum(-1)
    assert kernels(out) == ["elementwise", "reduce"]
    rounded_np = (np.sqrt(np.exp(f) * np.float32(10) / (np.abs(f) + np.float32(1))) * np.float32(3)
                  + np.float32(0.5)).astype(np.int8)
    np.testing.assert_array_equal(out.numpy(), x.astype(np.int64) @ rounded_np.astype(np.int64).T)


def test_work_shared_between_outputs_is_done_once():
    x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    s = x.sum(1)
    a, b = s + 1, s * 2
    assert kernels(a, b) == ["reduce", "elementwise", "elementwise"]
    Tensor.realize(a, b)
    np.testing.assert_array_equal(a.numpy(), np.arange(24).reshape(4, 6).sum(1) + 1)
    np.testing.assert_array_equal(b.numpy(), np.arange(24).reshape(4, 6).sum(1) * 2)


def test_a_reduction_read_through_shared_elementwise_work_is_done_once():
    """logits = x @ w + b read by two outputs (a classifier's loss gradient and its softmax statistics): the matmul
    gets a kernel of its own, whichever output is scheduled first, instead of a copy inside the first one."""
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 7), (7, 5), (5,)))
    logits = Tensor(x) @ Tensor(w) + Tensor(b)
    e, m = logits.exp(), logits.max(1)
    assert kernels(e, m) == ["reduce", "elementwise", "reduce"]  # the matmul, exp(. + b), max(. + b)
    Tensor.realize(e, m)
    np.testing.assert_allclose(e.numpy(), np.exp(x @ w + b), rtol=1e-5)
    np.testing.assert_allclose(m.numpy(), (x @ w + b).max(1), rtol=1e-5)


def test_realized_values_are_reused():
    x = Tensor(np.arange(8, dtype=np.float32))
    y = (x * 3).realize()
    before = GlobalCounters.kernel_count
    z = (x * 3) + y  # the same lazy graph as y: read from y's buffer
    z.realize()
    assert GlobalCounters.kernel_count - before == 1
    np.testing.assert_array_equal(z.numpy(), np.arange(8) * 6)


def test_memory_returns_to_baseline():
    """Buffers go back as soon as the last tensor using them does: no reference cycles, no waiting for gc."""
    gc.collect()
    gc.disable()
    try:
        base = GlobalCounters.mem_used
        x = Tensor(np.ones((64, 64), np.float32))
        y = ((x * 2).sum(1, keepdim=True).expand(64, 64) + x).sum()
        assert y.item() == 129 * 64 * 64
        assert GlobalCounters.mem_used > base
        del x, y
        assert GlobalCounters.mem_used == base
    finally:
        gc.enable()


def test_null_device_runs_schedules_without_memory():
    base = GlobalCounters.mem_used
    x = Tensor.empty(1024, 1024, device="NULL")
    before = GlobalCounters.kernel_count
    ((x + 1) @ x).realize()
    assert GlobalCounters.kernel_count - before == 1
    assert GlobalCounters.mem_used == base


def test_disk_tensor_reads_the_file_slice(tmp_path):
    data = np.arange(1000, dtype=np.int32)
    path = tmp_path / "data.bin"
    data.tofile(path)
    disk = Tensor.empty(1000, dtype="int32", device=f"DISK:{path}")
    part = disk.shrink(((100, 164),)).to("CPU")
    assert kernels(part) == ["copy"]  # a view of the file, copied: no compute kernel
    np.testing.assert_array_equal(part.numpy(), data[100:164])


def test_debug_2_prints_one_line_per_kernel():
    code = ("import numpy as np; from tgcore.tensor import Tensor;"
            "a = Tensor(np.ones((64, 64), np.float32)); ((a + 1).sum(1) * 2).numpy()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, DEBUG="2"))
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("***")]
    assert len(lines) == 1
    assert "CPU" in lines[0] and "r_64_64" in lines[0] and "GFLOPS" in lines[0] and "GB/s" in lines[0]


@pytest.mark.parametrize("level, marker", [(3, "SINK"), (4, "void r_"), (5, "RANGE")])
def test_debug_levels_show_ast_source_and_uops(level, marker):
    code = ("import numpy as np; from tgcore.tensor import Tensor;"
            "Tensor(np.arange(12, dtype=np.float32)).reshape(3, 4).sum(1).numpy()")
    env = dict(os.environ, DEBUG=str(level))
    if level == 4:  # the marker is C source: an ISA renderer (DEV=CPU:X86) prints its listing instead
        env["DEV"] = "CPU"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert marker in r.stdout


def test_a_long_lazy_chain_schedules_without_recursion_errors():
    x = Tensor(np.zeros(4, np.float32))
    t = x
    for _ in range(3000):
        t = t + 1.0
    assert t.tolist() == [3000.0] * 4


CROP_DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.mark.parametrize("device", CROP_DEVICES)
def test_a_crop_of_a_reduction_is_stored_by_the_reduction_kernel(device):
    """A realized crop (reshapes and shrinks) of a reduction's contiguous result: one kernel computes the reduction
    over its own shape and stores only the elements the crop keeps, where it puts them (no copy kernel after it).
    Rows of positions cropped at their ends, the way a flat convolution's are, and a crop at both ends."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 24)).astype(np.float32), rng.standard_normal((24, 64)).astype(np.float32)
    product = Tensor(a, device=device) @ Tensor(b, device=device)
    rows = product.contiguous().shrink((None, (0, 57))).reshape(4, 3, 19).shrink((None, None, (0, 17)))
    middle = product.contiguous()[1:3, 5:60]
    for crop, want in ((rows, (a @ b)[:, :57].reshape(4, 3, 19)[:, :, :17]), (middle, (a @ b)[1:3, 5:60])):
        assert kernels(crop) == ["reduce"]
        np.testing.assert_allclose(crop.numpy(), want, rtol=1e-5, atol=1e-5)
