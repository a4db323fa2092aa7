"""bfloat16 and float16 through einloop.torch: custom operators on bfloat16 tensors (forward and
generated gradients, static and dynamic shapes) and ``torch.compile(backend="einloop")`` on
bfloat16 and float16 graphs, every operator an einloop kernel.

What is compared.  bfloat16 keeps 8 significant bits, so einloop and eager PyTorch differ by a
rounding wherever they round at different points (einloop fuses a chain of operators and
rounds the chain's result; eager rounds every operator).  The checks are therefore against the
float32 computation on the same bfloat16 inputs: einloop's error must be within a bfloat16
rounding of the result (or, for whole models, no larger than eager PyTorch's own error plus
one rounding).  Long reductions are checked against eager exactly: a sum, mean, variance,
normalisation or product over 4,096 elements accumulated in bfloat16 is wrong by far more than
a rounding (it stops growing once the sum is 256 addends), and PyTorch, like einloop, sums in
float32.  float16 is checked the same way (11 significant bits) on the long reductions and the
models."""
import pytest
import torch
import torch.nn.functional as F

import einloop.torch as et
from einloop import te

from test_backend import MODELS, OPS, all_in_einloop, lowered

torch.manual_seed(0)
BF16 = torch.bfloat16
HALVES = [torch.bfloat16, torch.float16]
#: one rounding, relative (half an ulp is 2^-9 in bfloat16, 2^-12 in float16; two roundings'
#: worth)
ROUNDING = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def close_to(got, want, scale=None, ulps=2.0):
    """*got* (bfloat16 or float16) within *ulps* roundings of *want* (float32), relative to
    the result's magnitude *scale* (the largest |want| by default)."""
    assert got.dtype in ROUNDING, got.dtype
    scale = float(want.abs().max()) if scale is None else scale
    err = float((got.float() - want).abs().max())
    assert err <= ulps * ROUNDING[got.dtype] * max(scale, 1e-3), (err, scale)


def _rms(x, w):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    ss = te.compute((n,), lambda i: te.sum(x[i, k].astype("float32") * x[i, k].astype("float32"),
                                           axis=k), name="ss")
    return te.compute((n, d), lambda i, j: (x[i, j].astype("float32") * w[j].astype("float32")
                                            / te.sqrt(ss[i] / d + 1e-6)).astype(x.dtype),
                      name="y")


def _rms_eager(x, w):
    return x * w / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_custom_op_on_bfloat16_tensors_forward_and_gradients(dynamic):
    op = et.custom_op(f"bf16test::rms_{'dyn' if dynamic else 'static'}", dynamic=dynamic)(_rms)
    w = torch.randn(48, dtype=BF16, requires_grad=True)
    for n in (5, 9) if dynamic else (5,):
        x = torch.randn(n, 48, dtype=BF16, requires_grad=True)
        y = op(x, w)
        xr, wr = (t.detach().float().requires_grad_() for t in (x, w))
        want = _rms_eager(xr, wr)
        close_to(y, want.detach())
        g = torch.randn(n, 48)
        y.backward(g.to(BF16))
        want.backward(g.to(BF16).float())
        assert x.grad.dtype == BF16 and w.grad.dtype == BF16
        # the gradient kernels round their intermediate stages (bfloat16 by the declaration)
        close_to(x.grad, xr.grad, ulps=8)
        close_to(w.grad, wr.grad, ulps=8)
        w.grad = None


#: the ATen table's cases whose float inputs can be bfloat16; left out: the softmax gradients
#: case passes ``input_dtype=float32`` with bfloat16 gradients, where PyTorch's decomposition
#: returns float32 and its eager kernel bfloat16 (a call autograd never makes)
BF16_OPS = [name for name in OPS if name != "softmax gradients"]


@pytest.mark.parametrize("name", BF16_OPS)
def test_aten_op_on_bfloat16_runs_as_an_einloop_kernel(name):
    fn, inputs = OPS[name]
    inputs = tuple(t.to(BF16) if t.is_floating_point() else t for t in inputs)
    compiled, left = lowered(fn, *inputs)
    assert left == [], f"{name}: left to PyTorch: {left}"
    got, eager = compiled(*inputs), fn(*inputs)
    assert got.dtype == eager.dtype and got.shape == eager.shape
    if not got.is_floating_point():
        assert torch.equal(got, eager)
        return
    # every elementwise step of the case rounds in eager and in einloop alike; the cases'
    # sums of a few terms differ from eager by a rounding of their largest term at most
    scale = max(float(eager.float().abs().max()), 1.0)
    err = float((got.float() - eager.float()).abs().max())
    assert err <= 8 * ROUNDING[BF16] * scale, (err, scale)


LONG = {
    "sum": lambda a: a.sum(1),
    "mean": lambda a: a.mean(-1),
    "var": lambda a: a.var(1),
    "softmax": lambda a: torch.softmax(a, 1) * 4096,
    "log_softmax": lambda a: F.log_softmax(a, 1),
    "layer_norm": lambda a: F.layer_norm(a, (4096,)),
    "native_layer_norm statistics": lambda a: torch.ops.aten.native_layer_norm(
        a, [4096], None, None, 1e-5)[2][:, 0] + torch.ops.aten.native_layer_norm(
        a, [4096], None, None, 1e-5)[1][:, 0],
    "mm": lambda a: a @ a.t(),
    "linear with bias": lambda a: F.linear(a, a, a[0, :2]),
    "gelu": lambda a: F.gelu((a - 1.5) * 4),           # exact in bfloat16: [-2, 2) by 2^-5
}


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name", list(LONG))
def test_long_half_precision_reductions_accumulate_in_float32_as_pytorch(name, dtype):
    """Rows of 4,096 values in [1, 2): a bfloat16 accumulator would stop at 256 (or drift by
    tens of percent); PyTorch's kernels sum in float32 and round the result once."""
    a = (1 + torch.arange(4096) / 4096).repeat(2, 1)
    a[1] = a[1].flip(0)
    a = a.to(dtype)
    fn = LONG[name]
    compiled, left = lowered(fn, a)
    assert left == []
    got, eager, exact = compiled(a), fn(a), fn(a.float())
    close_to(got, exact, ulps=1.0)              # within a rounding of the float32 result
    close_to(eager, exact, ulps=2.0)            # (eager: log_softmax rounds twice)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name", ["mlp", "encoder", "cnn"])
def test_half_precision_models_compiled_as_einloop_kernels_as_accurate_as_eager(name, dtype):
    model, inputs = MODELS[name]()
    model = model.to(dtype).eval()
    inputs = tuple(t.to(dtype) for t in inputs)
    got, eager = all_in_einloop(model, *inputs)
    with torch.no_grad():
        exact = model.float()(*[t.float() for t in inputs])
    assert got.dtype == dtype and got.shape == eager.shape
    err = float((got.float() - exact).abs().max())
    eager_err = float((eager.float() - exact).abs().max())
    assert err <= eager_err + ROUNDING[dtype] * float(exact.abs().max()), (err, eager_err)
