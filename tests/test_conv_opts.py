"""The kernels of a stride-1 convolution over flat positions (``nn.functional.conv._conv_flat``) and of its gradients
(``_conv_flat_grad``: the input's a transposed convolution of the same form, the weight's a product over the batch
and the positions, two reduced axes): every legal optimization list and the default policy's give numpy's numbers.

Inputs are small integers in float32, so every sum is exact whatever the order of the additions: results must equal
the numpy reference (``conv2d_reference``, written from the definition tap by tap) bit for bit. Devices, the list
strategy and the number of examples (``TG_OPT_EXAMPLES``) are those of ``test_opts.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_opts import DEVICES, FUZZ, legal_opts, linear, small_ints

import tgcore.nn.functional as F
from tgcore.codegen import default_policy, prepare_kernel, simplify_kernel
from tgcore.codegen.optimize import Opt, OptOps, apply_opts, kernel_axes
from tgcore.codegen.upcast import _stride
from tgcore.dtype import dtypes
from tgcore.engine.realize import compile_runner, run_schedule
from tgcore.nn.functional import conv as conv_module
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import Ops

pytestmark = pytest.mark.usefixtures("spec_on")  # every rewrite checks its spec


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def conv2d_reference(x: np.ndarray, w: np.ndarray, g: np.ndarray, padding: int, dilation: int,
                     groups: int) -> dict[str, np.ndarray]:
    """Output, input gradient and weight gradient of a stride-1 conv2d for the output gradient ``g``, tap by tap."""
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    oh, ow = h + 2 * padding - dilation * (kh - 1), wd + 2 * padding - dilation * (kw - 1)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out = np.zeros((n, cout, oh, ow), np.float32)
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    og = cout // groups
    for grp in range(groups):
        cs, os_ = slice(grp * cin_g, (grp + 1) * cin_g), slice(grp * og, (grp + 1) * og)
        for i in range(kh):
            for j in range(kw):
                at = (slice(None), cs, slice(i * dilation, i * dilation + oh), slice(j * dilation, j * dilation + ow))
                out[:, os_] += np.einsum("nchw,oc->nohw", xp[at], w[os_, :, i, j])
                dxp[at] += np.einsum("nohw,oc->nchw", g[:, os_], w[os_, :, i, j])
                dw[os_, :, i, j] = np.einsum("nohw,nchw->oc", g[:, os_], xp[at])
    dx = dxp[:, :, padding:padding + h, padding:padding + wd]
    return {"output": out, "input": dx, "weight": dw}


def flat_conv(which: str, x: np.ndarray, w: np.ndarray, g: np.ndarray, padding: int, dilation: int, groups: int,
              device: str) -> Tensor:
    """The output, input gradient or weight gradient of ``F.conv2d`` over flat positions, lazy."""
    xt = Tensor(x, device=device, requires_grad=True)
    wt = Tensor(w, device=device, requires_grad=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv_module, "FLAT_CONV_MIN_FLOPS", 0)
        out = F.conv2d(xt, wt, padding=padding, dilation=dilation, groups=groups)
    if which == "output":
        return out
    out.backward(Tensor(g, device=device))
    return xt.grad if which == "input" else wt.grad


def run_product_with(t: Tensor, opts: list[Opt] | None, device: str) -> tuple[np.ndarray, list[Opt], list] | None:
    """``t`` computed with ``opts`` (None: the default policy's) for the one product kernel of its schedule (the
    copies around it get the default policy); returns the result, the list and the product's axes (None when the
    schedule has no product: a sum over one element is a copy)."""
    items, _ = create_schedule([t.uop], device)
    products = [i for i, si in enumerate(items) if any(u.op is Ops.REDUCE for u in simplify_kernel(si.ast).toposort)]
    if not products:  # (a sum over one element, folded: a copy)
        return None
    (k,) = products
    product = items[k]
    dev = open_device(device)
    if opts is None:
        opts = default_policy(prepare_kernel(product.ast, dev.renderer), dev.renderer, getattr(dev, "threads", 1))
    run_schedule(items[:k])
    runner = compile_runner(product.device, product.ast, opts)
    product.bufs[0].copyin(np.full(product.bufs[0].size, np.nan, product.bufs[0].dtype.np))
    handles = [product.bufs[i].ensure_allocated().handle for i in runner.spec.buf_slots]
    runner.program(*handles, vals=tuple(product.var_vals[v] for v in runner.spec.vars), threads=runner.spec.threads)
    run_schedule(items[k + 1:])
    axes = [(r.arg.kind, r.src[0].arg) for r in kernel_axes(simplify_kernel(product.ast))]
    return items[-1].bufs[0].numpy().reshape(t.shape), opts, axes


def conv_case(seed: int, batch: int, cin: int, cout: int, size: tuple[int, int], kernel: tuple[int, int],
              padding: int, dilation: int, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = small_ints(rng, (batch, cin) + size)
    w = small_ints(rng, (cout, cin // groups) + kernel)
    out_sp = tuple(s + 2 * padding - dilation * (k - 1) for s, k in zip(size, kernel, strict=True))
    return x, w, small_ints(rng, (batch, cout) + out_sp)


@FUZZ
@given(data=st.data(), which=st.sampled_from(["weight", "input", "output"]), batch=st.sampled_from([1, 2]),
       channels=st.sampled_from([(2, 3, 1), (4, 4, 2), (1, 5, 1), (6, 2, 2)]),
       size=st.sampled_from([(5, 7), (8, 8), (7, 3)]), kernel=st.sampled_from([(3, 3), (1, 1), (2, 3)]),
       padding=st.sampled_from([0, 1]), dilation=st.sampled_from([1, 2]))
def test_flat_convolution_products_with_any_legal_list_match_numpy(device, data, which, batch, channels, size,
                                                                  kernel, padding, dilation):
    cin, cout, groups = channels
    if min(s + 2 * padding - dilation * (k - 1) for s, k in zip(size, kernel, strict=True)) < 1:
        return  # no output position
    x, w, g = conv_case(batch * 7 + cin, batch, cin, cout, size, kernel, padding, dilation, groups)
    t = flat_conv(which, x, w, g, padding, dilation, groups, device)
    found = run_product_with(t, [], device)
    if found is None:
        return
    axes = found[2]
    opts = data.draw(legal_opts(axes, vector=linear(device), tile=linear(device),
                                registers=open_device(device).renderer.vector_registers), label="opts")
    got = run_product_with(t, opts, device)
    assert got is not None
    ref = conv2d_reference(x, w, g, padding, dilation, groups)[which]
    np.testing.assert_array_equal(got[0], ref, err_msg=f"{device} {which} {axes} {[str(o) for o in opts]}")


# odd and degenerate shapes: (batch, cin, cout, size, kernel, padding, dilation, groups) (padding beyond the
# kernel's reach: the input gradient crops the output gradient); the last two are large
# enough for the register tiles (and, for the weight gradient, the K blocks of its positions) on CPU
SHAPES = [(1, 3, 5, (9, 11), (3, 3), 1, 1, 1), (2, 4, 4, (6, 6), (1, 1), 0, 1, 2), (1, 2, 3, (13, 12), (7, 7), 3, 1, 1),
          (3, 6, 4, (10, 7), (3, 2), 2, 2, 2), (1, 1, 1, (5, 5), (3, 3), 1, 1, 1), (2, 3, 2, (6, 5), (3, 3), 3, 1, 1),
          (2, 16, 32, (30, 30), (3, 3), 1, 1, 1), (1, 24, 40, (66, 66), (3, 3), 1, 1, 1)]


@pytest.mark.parametrize("which", ["output", "input", "weight"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_flat_convolution_products_with_the_default_list_match_numpy(device, which, shape):
    batch, cin, cout, size, kernel, padding, dilation, groups = shape
    if device == "PYTHON" and batch * cin * cout * size[0] * size[1] > 10_000:
        pytest.skip("the interpreter takes seconds per large product")
    x, w, g = conv_case(sum(size) + cin, batch, cin, cout, size, kernel, padding, dilation, groups)
    t = flat_conv(which, x, w, g, padding, dilation, groups, device)
    found = run_product_with(t, None, device)
    if found is None:
        pytest.skip("no product kernel")
    got, opts, axes = found
    ref = conv2d_reference(x, w, g, padding, dilation, groups)[which]
    np.testing.assert_array_equal(got, ref, err_msg=f"{device} {which} {axes} {[str(o) for o in opts]}")


def test_weight_gradient_of_the_bench_convolution_gets_a_register_tile_and_k_blocks():
    """conv2d 3x3 64->64 56^2 batch 8 (bench/ops.py): its weight gradient is a product with output channels as
    vector columns (stored as whole vectors), input channels as unrolled rows, and its positions in K blocks (the
    batch inside) whose block of the output gradient fits a quarter of L2; the rows split over the threads."""
    from test_gemm import _renderer
    x = Tensor.empty(8, 64, 56, 56, device="CPU").requires_grad_()
    w = Tensor.empty(64, 64, 3, 3, device="CPU").requires_grad_()
    out = F.conv2d(x, w, padding=1)
    out.backward(Tensor.empty(8, 64, 56, 56, device="CPU"))
    items, _ = create_schedule([w.grad.uop], "CPU")
    (ast,) = [si.ast for si in items if any(u.op is Ops.REDUCE for u in simplify_kernel(si.ast).toposort)]
    renderer = _renderer(512, 32)
    kernel = prepare_kernel(ast, renderer)
    opts = default_policy(kernel, renderer, 2)
    axes = kernel_axes(kernel.ast)
    by_op = {op: [o for o in opts if o.op is op] for op in OptOps}
    assert [axes[o.axis].src[0].arg for o in by_op[OptOps.UPCAST]] == [64], opts  # output channels in vectors
    (store,) = kernel.ast.src  # ... stored as whole vectors (into the weight's order they went lane by lane)
    assert _stride(store.src[0].src[1], axes[by_op[OptOps.UPCAST][0].axis]) == 1
    rows = [o for o in by_op[OptOps.UNROLL] if o.axis != by_op[OptOps.UPCAST][0].axis]
    assert [axes[o.axis].src[0].arg for o in rows] == [64], opts  # input channels unrolled (not 3 taps)
    (tile,) = by_op[OptOps.TILE]
    assert axes[tile.axis].src[0].arg == 56 * 57 and (56 * 57) % tile.amount == 0, opts  # the positions (rows of 57)
    assert 8 * tile.amount * 64 * 4 * 4 <= renderer.cache_sizes.l2, opts   # with the batch, a quarter of L2
    assert [o.amount for o in by_op[OptOps.THREAD]] == [2], opts


@pytest.mark.parametrize("which", ["output", "input"])
def test_bench_convolution_gets_a_tile_of_whole_rows(which):
    """conv2d 3x3 64->64 56^2 batch 8 (bench/ops.py), forward and input gradient: the taps shift the input's vectors
    by single elements (most loads straddle two cache lines), so the register tile takes more output channels and
    fewer vectors (8 x 3 at AVX-512: 6 x 4 pads 64 channels to 66 and measured ~9% slower), no padded rows. The
    positions (56 rows of 57 on the flat grid, 3192, rounded up to 3200) end in a partial tile: padded to whole tiles
    of 3 vectors, whose last vector is stored or not as a whole."""
    from test_gemm import _renderer
    x = Tensor.empty(8, 64, 56, 56, device="CPU").requires_grad_()
    w = Tensor.empty(64, 64, 3, 3, device="CPU").requires_grad_()
    out = F.conv2d(x, w, padding=1)
    out.backward(Tensor.empty(8, 64, 56, 56, device="CPU"))
    items, _ = create_schedule([(out if which == "output" else x.grad).uop], "CPU")
    ast = [si.ast for si in items if any(u.op is Ops.REDUCE for u in simplify_kernel(si.ast).toposort)][-1]
    renderer = _renderer(512, 32)
    kernel = prepare_kernel(ast, renderer)
    opts = default_policy(kernel, renderer, 2)
    axes = kernel_axes(kernel.ast)
    unrolls = {axes[o.axis].src[0].arg: o.amount for o in opts if o.op is OptOps.UNROLL}
    assert [(axes[o.axis].src[0].arg, o.amount) for o in opts if o.op is OptOps.PAD] == [(3200, 48)], opts
    assert unrolls == {64: 8, 3200: 3}, opts  # channels by 8, the positions in 3 vectors of 16


def test_bench_convolution_stores_its_rows_through_the_crop():
    """conv2d 3x3 64->64 56^2 batch 8 (bench/ops.py) realized alone: two kernels, the padded copy and the product,
    which computes over the flat grid (rows of 57) and stores only each row's 56 outputs, straight into the result
    (no crop copy after it). A vector of positions that crosses a row end is stored as two pieces, each one vector
    store with a gate per lane (``_Expander.row_pieces``), not lane by lane: 2 vector stores per register vector."""
    from test_gemm import _renderer
    x, w = Tensor.empty(8, 64, 56, 56, device="CPU"), Tensor.empty(64, 64, 3, 3, device="CPU")
    items, _ = create_schedule([F.conv2d(x, w, padding=1).uop], "CPU")
    assert [si.kind for si in items] == ["elementwise", "reduce"]
    assert items[1].bufs[0].size == 8 * 64 * 56 * 56
    renderer = _renderer(512, 32)
    kernel = prepare_kernel(items[1].ast, renderer)
    ast, _ = apply_opts(kernel.ast, default_policy(kernel, renderer, 2), renderer)
    stores = [u for u in ast.toposort if u.op is Ops.STORE]
    assert len(stores) == 2 * 8 * 3 and all(s.src[1].dtype.count == 16 for s in stores)
    # each piece's gate is a range of lanes from scalar bounds (``_Expander.lane_range``), not a bool per lane
    gates = [u for s in stores for u in s.src[0].src[2].toposort if u.op is Ops.VECTORIZE]
    assert gates and all(all(x is g.src[0] for x in g.src) and g.src[0].dtype == dtypes.int32 for g in gates)


def test_padded_copy_of_the_input_unrolls_its_row_of_vectors():
    """The flat convolution's padded copy of its input (rows of 57 = 7 vectors of 8 and a gated one): the row's
    8 vectors are unrolled, so each copy's lane gates are constants (the X86 renderer unrolls no loop by itself:
    it built both lane masks lane by lane on every iteration, 3x the C renderer's time)."""
    from test_gemm import _renderer
    x = Tensor.empty(8, 64, 56, 56, device="CPU")
    out = F.conv2d(x, Tensor.empty(64, 64, 3, 3, device="CPU"), padding=1)
    items, _ = create_schedule([out.uop], "CPU")
    renderer = _renderer(512, 32)
    renderer.simd_widths = {dtypes.float32: 8}
    kernel = prepare_kernel(items[0].ast, renderer)
    axes = kernel_axes(kernel.ast)
    assert axes[-1].src[0].arg == 57  # (a row's zeros after it are the next row's before it)
    opts = [o for o in default_policy(kernel, renderer, 1) if o.axis == len(axes) - 1]
    assert [(o.op, o.amount) for o in opts] == [(OptOps.PAD, 8), (OptOps.UPCAST, 8), (OptOps.UNROLL, 8)], opts


@pytest.mark.parametrize("kernel,dilation", [((2, 4), 1), ((3, 2), 2), ((4, 4), 1)])
def test_flat_convolution_with_uneven_same_padding_matches_torch(device, kernel, dilation):
    """padding='same' of an even kernel pads one side more than the other: the input gradient pads the output
    gradient by the kernel's reach less each side's padding."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(sum(kernel) + dilation)
    x_np, w_np = rng.standard_normal((2, 3, 9, 8)).astype(np.float32), rng.standard_normal((4, 3) + kernel)
    g_np = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    x, w = Tensor(x_np, device=device, requires_grad=True), Tensor(w_np.astype(np.float32), device=device,
                                                                   requires_grad=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv_module, "FLAT_CONV_MIN_FLOPS", 0)
        out = F.conv2d(x, w, padding="same", dilation=dilation)
    out.backward(Tensor(g_np, device=device))
    xt, wt = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np.astype(np.float32), requires_grad=True)
    ref = torch.nn.functional.conv2d(xt, wt, padding="same", dilation=dilation)
    ref.backward(torch.tensor(g_np))
    for got, want in ((out, ref), (x.grad, xt.grad), (w.grad, wt.grad)):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "PYTHON"])
def test_a_crop_stored_through_with_k_tiles_matches_numpy(device):
    """Rows cropped at their ends, stored by the product's kernel through row pieces gated by ranges of lanes, with
    the reduction in K tiles: each tile's store adds what the earlier tiles left (a load through the same range
    gate, and one more term of it: not the first tile)."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 24)).astype(np.float32), rng.standard_normal((24, 64)).astype(np.float32)
    product = Tensor(a, device=device) @ Tensor(b, device=device)
    rows = product.contiguous().shrink((None, (0, 57))).reshape(4, 3, 19).shrink((None, None, (0, 17)))
    found = run_product_with(rows, None, device)
    assert found is not None
    axes = found[2]
    positions = next(i for i, (kind, size) in enumerate(axes) if size == 64)
    reduced = next(i for i, (kind, size) in enumerate(axes) if size == 24)
    got = run_product_with(rows, [Opt(OptOps.UPCAST, positions, 16), Opt(OptOps.TILE, reduced, 8)], device)
    assert got is not None
    np.testing.assert_allclose(got[0], (a @ b)[:, :57].reshape(4, 3, 19)[:, :, :17], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_a_crop_that_keeps_nothing_is_empty(device):
    """A crop of a product to zero columns is an empty result (it crashed on PYTHON: a store through the crop with
    nothing to store)."""
    a = Tensor(np.ones((4, 3), np.float32), device=device)
    b = Tensor(np.ones((3, 5), np.float32), device=device)
    got = (a @ b).contiguous()[:, 2:2].realize()
    assert got.shape == (4, 0) and got.numpy().shape == (4, 0)
