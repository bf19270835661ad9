"""Matrix products through the default policy's register tiles (``gemmplan.gemm_opts``): odd, degenerate and
large shapes against numpy (integer-valued inputs, so exact), batched and with an epilogue, gradients against
torch, on every device in ``TG_TEST_DEVICES``; and what the policy chooses for a renderer's register file."""
import os

import numpy as np
import pytest

from tgcore.codegen import simplify_kernel
from tgcore.codegen.gemmplan import gemm_opts
from tgcore.codegen.optimize import Opt, OptError, OptOps, apply_opts
from tgcore.dtype import dtypes
from tgcore.helpers import prod
from tgcore.renderer import Renderer
from tgcore.runtime.cpufeatures import CacheSizes
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]

# (M, N, K): ones, primes, one off a power of two, and shapes large enough for the register tiles and K tiles
SHAPES = [(1, 1, 1), (1, 64, 64), (7, 13, 5), (64, 64, 1), (127, 129, 131), (129, 128, 127), (96, 256, 300),
          (1000, 64, 96), (13, 784, 512), (37, 48, 2048), (256, 256, 256)]


def ints(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(-3, 4, shape).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matmul_is_exact(device, m, n, k):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a, b = ints(rng, m, k), ints(rng, k, n)
    np.testing.assert_array_equal((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a @ b)


@pytest.mark.parametrize("device", DEVICES)
def test_batched_matmul_with_epilogue(device):
    rng = np.random.default_rng(1)
    a, b, bias = ints(rng, 3, 70, 96), ints(rng, 3, 96, 64), ints(rng, 64)
    out = (Tensor(a, device=device) @ Tensor(b, device=device) + Tensor(bias, device=device)).relu().numpy()
    np.testing.assert_array_equal(out, np.maximum(a @ b + bias, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_gradients_match_torch(device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((67, 130)).astype(np.float32), rng.standard_normal((130, 96)).astype(np.float32)
    x, w = Tensor(a, device=device, requires_grad=True), Tensor(b, device=device, requires_grad=True)
    (x @ w).relu().sum().backward()
    xt, wt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (xt @ wt).relu().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-4)


def _matmul_ast(m: int, n: int, k: int, bias: bool = False):
    t = Tensor.empty(m, k, device="CPU") @ Tensor.empty(k, n, device="CPU")
    items = create_schedule([(t + Tensor.empty(n, device="CPU") if bias else t).uop], "CPU")[0]
    return simplify_kernel(items[-1].ast)


class _Machine(Renderer):
    """A renderer as codegen sees it: vectors, registers, caches and threads (it renders nothing here)."""
    has_threads = True
    masked_vectors = True


def _renderer(bits: int, registers: int) -> Renderer:
    r = _Machine()
    r.vector_bits, r.vector_registers, r.cache_sizes = bits, registers, CacheSizes(48 << 10, 2 << 20)
    return r


@pytest.mark.parametrize("bits,registers", [(512, 32), (256, 16)])
def test_policy_tile_fits_the_register_file(bits, registers):
    opts = gemm_opts(_matmul_ast(1024, 1024, 1024), _renderer(bits, registers), threads=2)
    by_op = {o.op: [x for x in opts if x.op is o.op] for o in opts}
    lanes = by_op[OptOps.UPCAST][0].amount
    assert lanes == bits // 32
    rows = [o.amount for o in by_op[OptOps.UNROLL] if o.axis == 0][0]
    vectors = [o.amount for o in by_op[OptOps.UNROLL] if o.axis == 1][0]
    assert rows * vectors + vectors + 1 <= registers  # accumulators, B's vectors and a broadcast of A
    assert by_op[OptOps.TILE][0].axis == 2 and 1024 % by_op[OptOps.TILE][0].amount == 0
    assert by_op[OptOps.THREAD] == [Opt(OptOps.THREAD, 0, 2)]


def test_policy_pads_rows_for_a_tile_that_does_not_divide_them():
    """1000 rows in tiles of 6 on two threads: padded to 1008 (whole tiles per thread, the K loop tiled); 1000
    columns in tiles of 4 zmm: padded to 1024, the last tile gated lane by lane."""
    opts = gemm_opts(_matmul_ast(1000, 1000, 1024), _renderer(512, 32), threads=2)
    assert Opt(OptOps.PAD, 0, 12) in opts and Opt(OptOps.UNROLL, 0, 6) in opts
    assert Opt(OptOps.PAD, 1, 64) in opts and Opt(OptOps.UNROLL, 1, 4) in opts
    assert opts.index(Opt(OptOps.PAD, 0, 12)) < opts.index(Opt(OptOps.UNROLL, 0, 6))


def test_policy_tiles_k_under_an_epilogue():
    """A sum stored with a bias added is K-tiled like a plain one (its partial sums live in the output, the bias
    is added after the last tile): a residual add after a long product no longer streams all of B per row tile."""
    opts = gemm_opts(_matmul_ast(256, 256, 2048, bias=True), _renderer(512, 32), threads=1)
    assert any(o.op is OptOps.TILE for o in opts)


# (rows padded and unrolled, columns vectorized, the reduced axis unrolled too: its copies' sum is what the
# epilogue is applied to) x (one K tile, several, on threads)
EPILOGUE_LISTS = [
    [Opt(OptOps.UNROLL, 1, 2), Opt(OptOps.TILE, 2, 16)],
    [Opt(OptOps.PAD, 0, 6), Opt(OptOps.UNROLL, 0, 6), Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.TILE, 2, 8)],
    [Opt(OptOps.PAD, 1, 16), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 1, 2), Opt(OptOps.PAD, 0, 4),
     Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.TILE, 2, 32), Opt(OptOps.THREAD, 0, 2)],
    [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.TILE, 2, 96)],  # one tile: no earlier sums, the epilogue at once
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opts", EPILOGUE_LISTS, ids=lambda opts: " ".join(map(str, opts)))
def test_k_tiles_apply_an_epilogue_once(device, opts):
    """K tiles under an epilogue (a residual add, a bias and relu, the sum used twice): exact against numpy. The
    epilogue sees the whole sum once, never a tile's partial sum."""
    from tgcore.runtime.registry import open_device
    if not open_device(device).renderer.linear and any(o.op in (OptOps.TILE, OptOps.UPCAST) for o in opts):
        pytest.skip(f"{device} takes the REDUCE form: no TILE")
    rng = np.random.default_rng(5)
    m, n, k = 13, 24, 96
    a, b, res, bias = ints(rng, m, k), ints(rng, k, n), ints(rng, m, n), ints(rng, n)
    ta, tb, tr, tbias = (Tensor(v, device=device).realize() for v in (a, b, res, bias))
    cases = [(tr + ta @ tb, res + a @ b), ((ta @ tb + tbias).relu(), np.maximum(a @ b + bias, 0)),
             ((ta @ tb) * (ta @ tb) - tr, (a @ b) * (a @ b) - res)]
    for out, want in cases:
        np.testing.assert_array_equal(_run_list(device, out, opts), want, err_msg=" ".join(map(str, opts)))


@pytest.mark.parametrize("device", DEVICES)
def test_an_in_place_residual_add_is_exact(device):
    """``x.assign(x + h @ w)`` stores into the buffer its epilogue reads: K tiles keep their partial sums in the
    output, so such a kernel is not K-tiled (it read the partial sums instead of x); exact against numpy."""
    rng = np.random.default_rng(7)
    m, n, k = 128, 256, 2048
    h, w, x = ints(rng, m, k), ints(rng, k, n), ints(rng, m, n)
    tx = Tensor(x, device=device).realize()
    tx.assign(tx + Tensor(h, device=device) @ Tensor(w, device=device)).realize()
    np.testing.assert_array_equal(tx.numpy(), x + h @ w)


def test_too_many_accumulators_is_an_error():
    ast = _matmul_ast(256, 256, 256)
    with pytest.raises(OptError, match="accumulators"):
        apply_opts(ast, [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 1, 4), Opt(OptOps.UNROLL, 0, 8)],
                   _renderer(256, 16))


def test_pad_after_a_split_is_an_error():
    with pytest.raises(OptError, match="PAD"):
        apply_opts(_matmul_ast(60, 64, 64), [Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.PAD, 0, 8)], _renderer(256, 16))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nd,kernel,padding,dilation,groups", [
    (2, (3, 3), 1, 1, 1), (2, (3, 5), (0, 2), 1, 1), (2, (3, 3), 2, 2, 1), (2, (3, 3), 1, 1, 2),
    (1, (5,), 2, 1, 1), (2, (1, 1), 0, 1, 1), (2, (2, 3), (3, 0), (2, 1), 2)])
def test_convolution_over_flat_positions_matches_torch(device, nd, kernel, padding, dilation, groups, monkeypatch):
    """Stride-1 convolutions computed over the flattened padded input (``conv._conv_flat``), forward and gradients."""
    torch = pytest.importorskip("torch")
    import tgcore.nn.functional as F
    from tgcore.nn.functional import conv as conv_module
    monkeypatch.setattr(conv_module, "FLAT_CONV_MIN_FLOPS", 0)
    rng = np.random.default_rng(nd * 10 + groups)
    spatial = {1: (23,), 2: (9, 11)}[nd]
    x_np = rng.standard_normal((2, 4) + spatial).astype(np.float32)
    w_np = rng.standard_normal((6, 4 // groups) + kernel).astype(np.float32)
    conv = {1: F.conv1d, 2: F.conv2d}[nd]
    tconv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d}[nd]
    b_np = rng.standard_normal(6).astype(np.float32)
    x, w = Tensor(x_np, device=device, requires_grad=True), Tensor(w_np, device=device, requires_grad=True)
    out = conv(x, w, Tensor(b_np, device=device), padding=padding, dilation=dilation, groups=groups)
    xt, wt = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    ref = tconv(xt, wt, torch.tensor(b_np), padding=padding, dilation=dilation, groups=groups)
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding", [(-1, 1), (2, 0, -1, 1), (1, -2, 0, -1)])
def test_convolution_over_flat_positions_with_a_crop_matches_torch(device, padding, monkeypatch):
    """Negative padding amounts crop the input before the flat windows are built (the zero rows past the last row
    must come after the crop): forward and gradients against torch's convolution of the padded/cropped input."""
    torch = pytest.importorskip("torch")
    import tgcore.nn.functional as F
    from tgcore.nn.functional import conv as conv_module
    monkeypatch.setattr(conv_module, "FLAT_CONV_MIN_FLOPS", 0)
    rng = np.random.default_rng(7)
    x_np = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    w_np = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    flat = padding if len(padding) == 4 else (padding[1], padding[1], padding[0], padding[0])  # torch's F.pad order
    x, w = Tensor(x_np, device=device, requires_grad=True), Tensor(w_np, device=device, requires_grad=True)
    out = F.conv2d(x, w, padding=padding)
    xt, wt = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    ref = torch.nn.functional.conv2d(torch.nn.functional.pad(xt, flat), wt)
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)


def _conv_backward_asts(x: Tensor, w: Tensor, padding: int) -> dict[str, object]:
    """The kernels of a conv -> relu -> max-pool -> sum pass and its gradients, by kernel name."""
    import tgcore.nn.functional as F
    from tgcore.codegen.opts import kernel_name
    out = F.max_pool2d(F.conv2d(x, w, padding=padding).relu(), 2)
    out.sum().backward()
    asts = [simplify_kernel(si.ast) for si in create_schedule([out.uop, x.grad.uop, w.grad.uop], "CPU")[0]]
    return {kernel_name(a): a for a in asts}


def test_policy_tiles_every_product_of_a_small_convolution():
    """The products of a small convolution (the convnet of bench/train.py: 8 -> 16 channels, 13x13 images) get a
    register tile: the forward pass one of vectors over each image's columns (its batch's rows count towards the
    work), the input gradient too (its output holds the windows: the columns it vectorizes are not contiguous
    there, its stores are scattered), the weight gradient (whose factor is the fused relu and pooling gradient),
    with no axis to vectorize, one of scalar accumulators (two output axes unrolled). Before, all three ran one
    scalar accumulator per output."""
    from tgcore.codegen import default_policy, prepare_kernel
    x = Tensor.empty(32, 8, 13, 13, device="CPU").requires_grad_()
    w = Tensor.empty(16, 8, 3, 3, device="CPU").requires_grad_()
    kernels = _conv_backward_asts(x, w, padding=0)
    renderer = _renderer(512, 32)

    def policy(name: str) -> list[Opt]:
        assert name in kernels, f"no kernel {name} among {sorted(kernels)}"
        return default_policy(prepare_kernel(kernels[name], renderer), renderer, 2)  # type: ignore[arg-type]
    forward, weight_grad, input_grad = (policy(n) for n in ("r_32_16_11_11_8_3_3", "r_16_8_3_3_32_11_11",
                                                            "r_32_8_11_11_3_3_16"))
    for opts in (forward, input_grad):
        assert [o.op for o in opts if o.op is OptOps.UPCAST] == [OptOps.UPCAST], opts
        assert any(o.op is OptOps.UNROLL for o in opts), opts
    unrolled = {o.axis for o in weight_grad if o.op is OptOps.UNROLL}
    assert len(unrolled) == 2 and not any(o.op is OptOps.UPCAST for o in weight_grad), weight_grad
    assert prod(o.amount for o in weight_grad if o.op is OptOps.UNROLL) <= renderer.vector_registers


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,cin,cout,size,padding", [(32, 8, 16, 13, 0), (3, 5, 7, 11, 1), (2, 1, 8, 28, 0)])
def test_convolution_gradients_through_relu_and_pooling_match_torch(device, batch, cin, cout, size, padding):
    """Forward, weight and input gradients of conv -> relu -> max-pool, the convnet's layers (their kernels get the
    register tiles of the test above; odd channel counts and sizes pad them), against torch."""
    torch = pytest.importorskip("torch")
    import tgcore.nn.functional as F
    rng = np.random.default_rng(batch * 100 + cin * 10 + cout)
    x_np = rng.standard_normal((batch, cin, size, size)).astype(np.float32)
    w_np = (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)
    g_np = rng.standard_normal((batch, cout, (size + 2 * padding - 2) // 2, (size + 2 * padding - 2) // 2))
    x, w = Tensor(x_np, device=device, requires_grad=True), Tensor(w_np, device=device, requires_grad=True)
    out = F.max_pool2d(F.conv2d(x, w, padding=padding).relu(), 2)
    (out * Tensor(g_np.astype(np.float32), device=device)).sum().backward()
    xt, wt = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    ref = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(xt, wt, padding=padding).relu(), 2)
    (ref * torch.tensor(g_np.astype(np.float32))).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=2e-3)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
def _sum_rows_ast(rows: int, n: int):
    t = Tensor.empty(rows, n, device="CPU").sum(-1)
    return simplify_kernel(create_schedule([t.uop], "CPU")[0][-1].ast)


@pytest.mark.parametrize("n", [576, 4096])
def test_short_reduction_lanes_do_not_depend_on_the_row_count(n):
    """A row's sum runs in the same lanes (so the same order) for 1, 2, 4 or 8 rows: batched LLM decode relies on
    it (before, one row summed in 32 lanes and four rows in 8)."""
    from tgcore.codegen.heuristic import vector_opts
    widths = {dtypes.float32: 8}

    def lanes(rows: int, size: int) -> int:
        opts = vector_opts(_sum_rows_ast(rows, size), widths)
        return next(o.amount for o in opts if o.op is OptOps.UPCAST)
    assert {lanes(r, n) for r in (1, 2, 4, 8)} == {8}


def test_rows_that_share_no_input_are_not_unrolled():
    """Attention's weights times values in a batched decode step, ``out[b, (h, d)] = sum_t w[b, h, t] v[b, t, d]``:
    every input runs along the batch rows (each row reads its own cache), so unrolled rows would share no load; the
    output axis's next vectors are unrolled instead, as for one row (8 of 8 lanes: a whole head of 64 per step). Rows
    against one shared matrix (a matmul) are unrolled. The default list's values match numpy."""
    from tgcore.codegen.heuristic import OUTPUT_CHAINS, vector_opts
    widths = {dtypes.float32: 8}
    assert OUTPUT_CHAINS[0] * widths[dtypes.float32] == 64
    rng = np.random.default_rng(3)
    w_np = rng.standard_normal((8, 3, 3, 1, 256)).astype(np.float32)
    v_np = rng.standard_normal((8, 3, 1, 256, 64)).astype(np.float32)
    out = (Tensor(w_np, device="CPU") @ Tensor(v_np, device="CPU")).permute(0, 3, 1, 2, 4).reshape(8, 576)
    ast = simplify_kernel(create_schedule([out.contiguous().uop], "CPU")[0][-1].ast)
    opts = vector_opts(ast, widths)
    assert Opt(OptOps.UNROLL, 0, 4) not in opts and Opt(OptOps.UNROLL, 1, OUTPUT_CHAINS[0]) in opts, opts
    ref = (w_np @ v_np).transpose(0, 3, 1, 2, 4).reshape(8, 576)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
    # a bias or a scale applied after the sum is no input of it (review: it made the rows count as sharing a load)
    bias_np = rng.standard_normal(576).astype(np.float32)
    for after, after_np in ((lambda o: o + Tensor(bias_np, device="CPU"), lambda o: o + bias_np),
                            (lambda o: o * Tensor(np.float32(3.0), device="CPU"), lambda o: o * np.float32(3.0))):
        scaled = after((Tensor(w_np, device="CPU") @ Tensor(v_np, device="CPU")).permute(0, 3, 1, 2, 4).reshape(8, 576))
        opts = vector_opts(simplify_kernel(create_schedule([scaled.contiguous().uop], "CPU")[0][-1].ast), widths)
        assert Opt(OptOps.UNROLL, 0, 4) not in opts and Opt(OptOps.UNROLL, 1, OUTPUT_CHAINS[0]) in opts, opts
        np.testing.assert_allclose(scaled.numpy(), after_np(ref), rtol=1e-5, atol=1e-4)
    matmul = Tensor.empty(8, 256, device="CPU") @ Tensor.empty(256, 576, device="CPU")
    shared = vector_opts(simplify_kernel(create_schedule([matmul.uop], "CPU")[0][-1].ast), widths)
    assert Opt(OptOps.UNROLL, 0, 4) in shared, shared


# odd shapes where the register tiles apply (rows or columns 1, 7 or prime, sizes one off a power of two, 1000),
# x @ W and x @ W.T: the policy's own list and the lists it chooses between (other tiles, K blocks, threads, row
# padding: the search's variations), each exact against numpy
POLICY_SHAPES = [(7, 1000, 263, False), (127, 129, 131, False), (131, 7, 1021, False), (1000, 67, 61, False),
                 (257, 263, 64, False), (129, 127, 256, True), (7, 1000, 263, True), (1, 2053, 1031, False)]
LISTS_PER_SHAPE = 6


def _run_list(device: str, out: Tensor, opts: list[Opt]) -> np.ndarray:
    from tgcore.engine.realize import compile_runner, run_schedule
    *before, last = create_schedule([out.uop], device)[0]
    run_schedule(before)
    runner = compile_runner(last.device, last.ast, opts)
    out_buf = last.bufs[0]
    out_buf.copyin(np.full(out_buf.size, np.nan, out_buf.dtype.np))  # every output must be written
    handles = [last.bufs[i].ensure_allocated().handle for i in runner.spec.buf_slots]
    runner.program(*handles, vals=tuple(last.var_vals[v] for v in runner.spec.vars), threads=runner.spec.threads)
    return out_buf.numpy().reshape(out.shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n,k,transposed", POLICY_SHAPES)
def test_every_list_the_policy_chooses_between_is_exact(device, m, n, k, transposed):
    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.search import candidates
    from tgcore.runtime.registry import open_device
    rng = np.random.default_rng(m + 3 * n + 7 * k)
    a, b = ints(rng, m, k), ints(rng, n, k) if transposed else ints(rng, k, n)
    ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    out = ta @ (tb.T if transposed else tb)
    renderer = open_device(device).renderer
    kernel = prepare_kernel(create_schedule([out.uop], device)[0][-1].ast, renderer)
    lists = candidates(kernel.ast, renderer, 2, kernel.work, LISTS_PER_SHAPE)
    want = a @ (b.T if transposed else b)
    for opts in lists:
        np.testing.assert_array_equal(_run_list(device, out, opts), want, err_msg=" ".join(map(str, opts)))


@pytest.mark.parametrize("device", DEVICES)
def test_every_list_the_policy_chooses_under_a_residual_add_is_exact(device):
    """A product long enough for K tiles (2048 x 256 of B) with a residual add, as a transformer's down projection
    ends: the policy's lists (its own K-tiled one first) are exact against numpy."""
    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.search import candidates
    from tgcore.runtime.registry import open_device
    rng = np.random.default_rng(11)
    m, n, k = 67, 256, 2048
    a, b, res = ints(rng, m, k), ints(rng, k, n), ints(rng, m, n)
    ta, tb, tr = (Tensor(v, device=device).realize() for v in (a, b, res))
    out = tr + ta @ tb
    renderer = open_device(device).renderer
    kernel = prepare_kernel(create_schedule([out.uop], device)[0][-1].ast, renderer)
    lists = candidates(kernel.ast, renderer, 2, kernel.work, LISTS_PER_SHAPE)
    assert not renderer.linear or any(o.op is OptOps.TILE for o in lists[0])
    for opts in lists:
        np.testing.assert_array_equal(_run_list(device, out, opts), res + a @ b, err_msg=" ".join(map(str, opts)))


@pytest.mark.parametrize("m,n,k,transposed", [s for s in POLICY_SHAPES if s[1] >= 16])
def test_no_odd_shape_gets_a_scalar_kernel(m, n, k, transposed):
    """Columns that whole vectors do not fill are padded (the last vector gated), not left scalar: one row times
    a 1031x2053 matrix read each column down its 2053-element stride, 20x slower."""
    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.heuristic import heuristic_opts
    renderer = _renderer(512, 32)
    renderer.simd_widths = {dtypes.float32: 8}
    out = Tensor.empty(m, k, device="CPU") @ (Tensor.empty(n, k, device="CPU").T if transposed
                                              else Tensor.empty(k, n, device="CPU"))
    kernel = prepare_kernel(create_schedule([out.uop], "CPU")[0][-1].ast, renderer)
    opts = heuristic_opts(kernel.ast, renderer, 2, kernel.work)
    assert any(o.op is OptOps.UPCAST for o in opts), opts


# products whose right-hand factor is read from a packed copy (``schedule.pack``): rows not whole cache lines apart
# (N = 1000, 129, 7) or B read across memory (x @ W.T); the thresholds lowered so the interpreter runs them too
PACKED_SHAPES = [(70, 1000, 23, False), (65, 129, 31, True), (64, 7, 33, True), (97, 200, 40, True),
                 (66, 130, 17, False)]


def _lower_pack_thresholds(monkeypatch):
    from tgcore.schedule import pack
    monkeypatch.setattr(pack, "PACK_MIN_FLOPS", 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n,k,transposed", PACKED_SHAPES)
def test_packed_products_are_exact(device, m, n, k, transposed, monkeypatch):
    """The pack is a kernel of its own writing B as (K, N rounded up to whole cache lines, 64 elements from 64
    columns on), and every list the policy chooses between for the product that reads it is exact."""
    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.search import candidates
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.pack import packed_width
    _lower_pack_thresholds(monkeypatch)
    rng = np.random.default_rng(m + 3 * n + 7 * k)
    a, b = ints(rng, m, k), ints(rng, n, k) if transposed else ints(rng, k, n)
    ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    out = ta @ (tb.T if transposed else tb)
    items = create_schedule([out.uop], device)[0]
    assert [si.kind for si in items] == ["elementwise", "reduce"]
    assert items[0].bufs[0].size == k * packed_width(n, 4) and packed_width(n, 4) % 16 == 0  # whole cache lines
    want = a @ (b.T if transposed else b)
    np.testing.assert_array_equal(out.numpy(), want)
    renderer = open_device(device).renderer
    kernel = prepare_kernel(items[-1].ast, renderer)
    for opts in candidates(kernel.ast, renderer, 2, kernel.work, LISTS_PER_SHAPE):
        np.testing.assert_array_equal(_run_list(device, ta @ (tb.T if transposed else tb), opts), want,
                                      err_msg=" ".join(map(str, opts)))


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_of_transposed_right_operands_is_packed(device):
    """Attention's scores in a prefill: queries (kv heads, group, T, head dim) times each kv head's keys
    transposed (read across memory). Each head's keys are packed in one (heads, K, N) copy, and the product (every
    list the policy chooses between) is exact."""
    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.search import candidates
    from tgcore.runtime.registry import open_device
    rng = np.random.default_rng(8)
    q, k = ints(rng, 3, 3, 128, 64), ints(rng, 3, 1, 130, 64)
    tq, tk = Tensor(q, device=device).realize(), Tensor(k, device=device).realize()
    out = tq @ tk.transpose(-1, -2)
    items = create_schedule([out.uop], device)[0]
    assert [si.kind for si in items] == ["elementwise", "reduce"]
    assert items[0].bufs[0].size == 3 * 64 * 192  # three heads' (64, 130 rounded up to 192) keys
    want = q @ k.transpose(0, 1, 3, 2)
    renderer = open_device(device).renderer
    kernel = prepare_kernel(items[-1].ast, renderer)
    for opts in candidates(kernel.ast, renderer, 2, kernel.work, 3 if device == "PYTHON" else LISTS_PER_SHAPE):
        np.testing.assert_array_equal(_run_list(device, tq @ tk.transpose(-1, -2), opts), want,
                                      err_msg=" ".join(map(str, opts)))


def test_products_with_few_rows_or_good_layouts_are_not_packed(monkeypatch):
    """Up to PACK_MIN_ROWS rows (batched decoding: each row summed as it would be alone), a B whose rows are whole
    cache lines apart (N = 64, 784) and a copy larger than PACK_MAX_BYTES are read in place: one kernel."""
    from tgcore.schedule.pack import PACK_MAX_BYTES, PACK_MIN_ROWS
    _lower_pack_thresholds(monkeypatch)
    big = PACK_MAX_BYTES // (4 * 2048) + 1
    for m, n, k, transposed in [(PACK_MIN_ROWS - 1, 1000, 24, False), (8, 130, 25, True), (100, 64, 26, False),
                                (100, 784, 27, False), (64, big, 2048, True)]:
        a = Tensor.empty(m, k, device="CPU")
        out = a @ (Tensor.empty(n, k, device="CPU").T if transposed else Tensor.empty(k, n, device="CPU"))
        assert [si.kind for si in create_schedule([out.uop], "CPU")[0]] == ["reduce"], (m, n, k, transposed)


@pytest.mark.parametrize("device", DEVICES)
def test_packed_linear_gradients_match_torch(device, monkeypatch):
    torch = pytest.importorskip("torch")
    import tgcore.nn.functional as F
    _lower_pack_thresholds(monkeypatch)
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal((72, 50)).astype(np.float32), rng.standard_normal((90, 50)).astype(np.float32)
    x, tw = Tensor(a, device=device, requires_grad=True), Tensor(w, device=device, requires_grad=True)
    F.linear(x, tw).relu().sum().backward()
    xt, wt = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.linear(xt, wt).relu().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-4)
