"""einloop.torch.custom_op: declarations registered as PyTorch operators, checked against eager
PyTorch, torch.library.opcheck and torch.compile(fullgraph=True).  Every operator gets a name of
its own: torch.library registers a name once per process."""
import itertools
import subprocess
import sys

import pytest
import torch

import einloop.torch as et
import einloop.torch.op as op_module
from einloop import te
from einloop.errors import ArgumentError, CustomOpError, Error, TuningError

_ids = itertools.count()


def _name(base):
    return f"einloop_test::{base}_{next(_ids)}"


def _rmsnorm(x, w):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    ss = te.compute((n,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="ss")
    return te.compute((n, d), lambda i, j: x[i, j] / te.sqrt(ss[i] / d + 1e-6) * w[j], name="y")


def _rmsnorm_eager(x, w):
    return x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6) * w


def _matmul_bias(x, w, b):
    n, k_ = x.shape
    m = w.shape[1]
    k = te.reduce_axis((0, k_), name="k")
    return te.compute((n, m), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k) + b[j], name="mm")


def _scale_and_rowmax(x):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    scaled = te.compute((n, d), lambda i, j: x[i, j] * 2.0, name="scaled")
    rowmax = te.compute((n,), lambda i: te.max(x[i, k], axis=k), name="rowmax")
    return scaled, rowmax


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rmsnorm_matches_eager(dtype):
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x, w = torch.randn(8, 24, dtype=dtype), torch.randn(24, dtype=dtype)
    y = op(x, w)
    assert y.dtype == dtype and y.shape == (8, 24)
    torch.testing.assert_close(y, _rmsnorm_eager(x, w), **_tol(dtype))


def test_matmul_bias_matches_eager():
    op = et.custom_op(_name("matmul_bias"))(_matmul_bias)
    x, w, b = torch.randn(5, 33), torch.randn(33, 7), torch.randn(7)
    torch.testing.assert_close(op(x, w, b), x @ w + b, rtol=1e-4, atol=1e-4)


def test_two_outputs_are_a_tuple():
    op = et.custom_op(_name("two_outputs"))(_scale_and_rowmax)
    x = torch.randn(6, 10)
    scaled, rowmax = op(x)
    torch.testing.assert_close(scaled, x * 2)
    torch.testing.assert_close(rowmax, x.max(1).values)


def test_integer_and_bool_dtypes():
    def masked_add(x, m):
        return te.compute(x.shape, lambda i: te.if_then_else(m[i], x[i] + 1, x[i]), name="ma")
    op = et.custom_op(_name("masked_add"))(masked_add)
    x = torch.arange(10, dtype=torch.int32)
    m = x % 3 == 0
    y = op(x, m)
    assert y.dtype == torch.int32
    assert torch.equal(y, torch.where(m, x + 1, x))


def test_opcheck_passes():
    rms = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    mm = et.custom_op(_name("matmul_bias"))(_matmul_bias)
    two = et.custom_op(_name("two_outputs"))(_scale_and_rowmax)
    torch.library.opcheck(rms.torch_op, (torch.randn(4, 16), torch.randn(16)))
    torch.library.opcheck(mm.torch_op, (torch.randn(3, 8), torch.randn(8, 5), torch.randn(5)))
    torch.library.opcheck(two.torch_op, (torch.randn(3, 9),))


def test_torch_compile_fullgraph_equals_eager():
    rms = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    mm = et.custom_op(_name("matmul_bias"))(_matmul_bias)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.Parameter(torch.randn(32))
            self.w = torch.nn.Parameter(torch.randn(32, 16))
            self.b = torch.nn.Parameter(torch.randn(16))

        def forward(self, x):
            return torch.relu(mm(rms(x, self.norm), self.w, self.b))

    model = Block()
    compiled = torch.compile(model, fullgraph=True)    # a graph break raises here
    x = torch.randn(8, 32)
    with torch.no_grad():                              # backward is not connected yet
        eager = model(x)
        got = compiled(x)
    torch.testing.assert_close(got, eager)
    torch.testing.assert_close(eager, torch.relu(_rmsnorm_eager(x, model.norm) @ model.w
                                                 + model.b).detach(), rtol=1e-4, atol=1e-4)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_torch_compile_with_dynamic_shapes_specialises_each_shape():
    """einloop compiles one kernel per shape: a dynamic trace's sizes are made concrete."""
    rms = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    f = torch.compile(lambda x, w: rms(x, w) + 1, fullgraph=True, dynamic=True)
    w = torch.randn(16)
    for n in (3, 5, 9):
        x = torch.randn(n, 16)
        torch.testing.assert_close(f(x, w), _rmsnorm_eager(x, w) + 1)


def test_one_kernel_per_signature(monkeypatch):
    built = []
    real_build = op_module.build

    def counting_build(*args, **kwargs):
        built.append(args[1])
        return real_build(*args, **kwargs)
    monkeypatch.setattr(op_module, "build", counting_build)
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x, w = torch.randn(4, 8), torch.randn(8)
    first = op(x, w)
    assert len(built) == 1
    second = op(torch.randn(4, 8), torch.randn(8))      # same signature: no build
    assert len(built) == 1
    torch.testing.assert_close(first, op(x, w))
    op(torch.randn(6, 8), torch.randn(8))               # another shape
    op(x.double(), w.double())                          # another dtype
    assert len(built) == 3
    assert second.shape == (4, 8)


def test_parameters_forward_under_no_grad_and_with_grad():
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    w = torch.nn.Parameter(torch.randn(12))
    x = torch.randn(3, 12, requires_grad=True)
    expected = _rmsnorm_eager(x.detach(), w.detach())
    with torch.no_grad():
        y = op(x, w)
    assert not y.requires_grad
    torch.testing.assert_close(y, expected)
    y = op(x, w)
    assert y.requires_grad and y.grad_fn is not None
    torch.testing.assert_close(y.detach(), expected)


def test_non_contiguous_inputs_are_made_contiguous():
    op = et.custom_op(_name("matmul_bias"))(_matmul_bias)
    x = torch.randn(9, 5).t()                # (5, 9), transposed strides
    w = torch.randn(9, 14)[:, ::2]           # (9, 7), strided
    b = torch.randn(7)
    assert not x.is_contiguous() and not w.is_contiguous()
    torch.testing.assert_close(op(x, w, b), x @ w + b, rtol=1e-4, atol=1e-4)


def test_backward_false_registers_no_autograd():
    op = et.custom_op(_name("rmsnorm"), backward=False)(_rmsnorm)
    x, w = torch.randn(3, 8, requires_grad=True), torch.randn(8)
    y = op(x, w)
    torch.testing.assert_close(y, _rmsnorm_eager(x.detach(), w))
    with pytest.raises(RuntimeError):        # PyTorch's: no autograd formula registered
        y.sum().backward()


def test_bad_inputs_are_einloop_errors():
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x, w = torch.randn(4, 8), torch.randn(8)
    op(x, w)
    with pytest.raises(ArgumentError, match="rank 3"):
        op(torch.randn(2, 4, 8), w)
    with pytest.raises(ArgumentError, match="float8_e4m3fn"):
        op(x.to(torch.float8_e4m3fn), w)
    with pytest.raises(ArgumentError, match="complex"):
        op(x, torch.randn(8, dtype=torch.complex64))
    with pytest.raises(ArgumentError, match="'w' must be a torch.Tensor"):
        op(x, 3.0)
    with pytest.raises(ArgumentError, match="takes 2 tensor"):
        op(x)
    with pytest.raises(ArgumentError, match="device meta"):   # the real implementation's check
        op._run(x.to("meta"), w.to("meta"))
    with pytest.raises(RuntimeError, match="floating point"):   # PyTorch refuses it itself
        torch.ones(3, dtype=torch.int64, requires_grad=True)


def test_meta_tensors_get_shapes_from_the_declaration():
    op = et.custom_op(_name("two_outputs"))(_scale_and_rowmax)
    scaled, rowmax = op(torch.empty(5, 7, device="meta"))
    assert scaled.device.type == rowmax.device.type == "meta"
    assert scaled.shape == (5, 7) and rowmax.shape == (5,)


def test_declaration_errors():
    with pytest.raises(CustomOpError, match="namespace::operator"):
        et.custom_op("no_namespace")(_rmsnorm)
    with pytest.raises(CustomOpError, match="plain positional"):
        et.custom_op(_name("varargs"))(lambda *xs: xs[0])
    with pytest.raises(CustomOpError, match="plain positional"):
        et.custom_op(_name("default"))(lambda x, w=None: x)
    identity = et.custom_op(_name("identity"))(lambda x: x)
    with pytest.raises(CustomOpError, match="placeholder"):
        identity(torch.randn(3))
    number = et.custom_op(_name("number"))(lambda x: 3)
    with pytest.raises(CustomOpError, match="must return a te tensor"):
        number(torch.randn(3))
    with pytest.raises(CustomOpError, match="cannot register.*reserved"):
        et.custom_op("prim::einloop_test_op")(_rmsnorm)
    assert issubclass(CustomOpError, Error)


def test_a_missing_log_is_a_tuning_error(tmp_path):
    op = et.custom_op(_name("rmsnorm"), log=str(tmp_path / "none.jsonl"))(_rmsnorm)
    with pytest.raises(TuningError, match="no tuning log"):
        op(torch.randn(2, 4), torch.randn(4))


def test_importing_einloop_never_imports_torch():
    code = ("import sys, einloop\n"
            "from einloop import te, autotune, runtime, build, create_schedule\n"
            "import einloop.cli, einloop.demo\n"
            "assert 'torch' not in sys.modules, 'einloop imported torch'\n"
            "import einloop.torch\n"
            "assert 'torch' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the backward ---------------------------------------------------------------------------------
# What this layer does with gradients: heads in, kernels built per signature, one gradient per
# float input (None for the bool mask), the backward traced by torch.compile; against PyTorch's
# own autograd, with te.gradient's kernels and with a hand-written gradient in its place (the
# seam takes any function of te.gradient's signature).

def _scaled(x, w, m):
    return te.compute(x.shape, lambda i, j: te.if_then_else(m[j], x[i, j] * w[j], 0.0), name="s")


def _scaled_eager(x, w, m):
    return torch.where(m, x * w, torch.zeros(()))


def _hand_gradient(output, inputs, head):
    """d/dx and d/dw of _scaled, by hand (the stand-in for te.gradient)."""
    x, w = inputs
    (mask,) = [t for t in output.op.input_tensors if t.name == "m"]
    n, _ = x.shape
    i = te.reduce_axis((0, n), name="i")
    dx = te.compute(x.shape, lambda a, b: te.if_then_else(mask[b], head[a, b] * w[b], 0.0),
                    name="dx")
    dw = te.compute(w.shape, lambda b: te.sum(te.if_then_else(mask[b], head[i, b] * x[i, b],
                                                              0.0), axis=i), name="dw")
    return [dx, dw]


def _eager_gradients(x, w, m, weight):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    (_scaled_eager(x, w, m) * weight).sum().backward()
    return x.grad, w.grad


@pytest.mark.parametrize("by_hand", [False, True], ids=["te.gradient", "by hand"])
def test_backward_through_gradient_kernels(monkeypatch, by_hand):
    if by_hand:
        monkeypatch.setattr(te, "gradient", _hand_gradient)
    op = et.custom_op(_name("scaled"))(_scaled)
    x = torch.randn(5, 6, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(6))
    m = torch.rand(6) > 0.3
    weight = torch.randn(5, 6)
    y = op(x, w, m)
    torch.testing.assert_close(y.detach(), _scaled_eager(x.detach(), w.detach(), m))
    (y * weight).sum().backward()
    gx, gw = _eager_gradients(x, w, m, weight)
    torch.testing.assert_close(x.grad, gx)
    torch.testing.assert_close(w.grad, gw)
    assert len(op._gradients) == 1             # one set of gradient kernels for the signature
    torch.library.opcheck(op.torch_op, (torch.randn(3, 6, requires_grad=True),
                                        torch.randn(6, requires_grad=True), m))
    inputs = (x.detach(), w.detach(), m)
    torch.library.opcheck(op.training_op, inputs)
    outs, saved = op.training_op(*inputs)
    torch.library.opcheck(op.backward_op,
                          (list(inputs), [weight], [*outs, *saved], True, [True, True]))
    torch.library.opcheck(op.backward_op, (list(inputs), [weight], list(outs), False,
                                           [False, True]))


def test_compiled_forward_and_backward_equal_eager():
    op = et.custom_op(_name("scaled"))(_scaled)

    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8))

        def forward(self, x, m):
            return torch.tanh(op(x, self.w, m)).sum()

    model = Scale()
    compiled = torch.compile(model, fullgraph=True)
    x, m = torch.randn(4, 8), torch.rand(8) > 0.5
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(x1, m).backward()
    eager_w = model.w.grad.clone()
    model.w.grad = None
    compiled(x2, m).backward()
    torch.testing.assert_close(x2.grad, x1.grad)
    torch.testing.assert_close(model.w.grad, eager_w)
    w_ref = model.w.detach().clone().requires_grad_()
    x_ref = x.clone().requires_grad_()
    torch.tanh(_scaled_eager(x_ref, w_ref, m)).sum().backward()
    torch.testing.assert_close(x1.grad, x_ref.grad)
    torch.testing.assert_close(eager_w, w_ref.grad)


def test_log_replays_the_tuned_schedule(tmp_path, monkeypatch):
    import warnings
    from einloop import autotune
    import einloop.autotune.api as api
    log = str(tmp_path / "mm.jsonl")
    x, w, b = (te.placeholder((16, 32), "float32", "x"), te.placeholder((32, 8), "float32", "w"),
               te.placeholder((8,), "float32", "b"))
    tensors = [x, w, b, _matmul_bias(x, w, b)]
    autotune.auto_schedule(tensors, n_trial=4, log=log, quiet=True, seed=0)

    def no_tuning(*args, **kwargs):
        raise AssertionError("the custom op tuned instead of replaying the log")
    monkeypatch.setattr(api, "make_tuner", no_tuning)
    monkeypatch.setattr(api, "tune", no_tuning)
    op = et.custom_op(_name("matmul_bias"), log=log)(_matmul_bias)
    X, W, B = torch.randn(16, 32), torch.randn(32, 8), torch.randn(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", autotune.UntunedScheduleWarning)   # the log has it
        torch.testing.assert_close(op(X, W, B), X @ W + B, rtol=1e-4, atol=1e-4)
    with pytest.warns(autotune.UntunedScheduleWarning):                    # the log lacks it
        torch.testing.assert_close(op(X[:4], W, B), X[:4] @ W + B, rtol=1e-4, atol=1e-4)


def _built_writes(op):
    """The names of the stages written by the gradient kernels *op* has built."""
    (kernels,) = op._gradients.values()
    return {t.name for k, n in kernels._kernels for t in kernels.plan.entries[k][2][n].writes}


def test_a_frozen_weight_costs_no_gradient_kernel():
    op = et.custom_op(_name("rmsnorm_frozen"))(_rmsnorm)
    x, w = torch.randn(6, 10, requires_grad=True), torch.randn(10)       # w is frozen
    op(x, w).sum().backward()
    xr = x.detach().clone().requires_grad_()
    _rmsnorm_eager(xr, w).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    assert w.grad is None
    built = _built_writes(op)
    assert "x.grad" in built and not any(name.startswith("w.grad") for name in built), built


def test_an_output_no_gradient_reaches_costs_no_gradient_kernel():
    op = et.custom_op(_name("scale_rowmax_half_used"))(_scale_and_rowmax)
    x = torch.randn(4, 7, requires_grad=True)
    scaled, _ = op(x)
    scaled.sum().backward()                 # rowmax is not used: no gradient arrives at it
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    (kernels,) = op._gradients.values()
    assert {k for k, _ in kernels._kernels} == {0}


# -- bad inputs: each an einloop error, or the result eager PyTorch gives ---------------------------

def _conv3x3(x, w):
    n, c, h, wd = x.shape
    o = w.shape[0]
    rc, ry, rx = (te.reduce_axis((0, e), name=nm) for e, nm in ((c, "rc"), (3, "ry"), (3, "rx")))
    return te.compute((n, o, h - 2, wd - 2), lambda b, f, y, xx: te.sum(
        x[b, rc, y + ry, xx + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")


def test_wrong_dtypes_are_einloop_errors():
    """Unsupported dtypes are refused before any declaration; supported ones the declaration
    cannot take (mixed precisions, integers into a division) are refused by te, naming the
    expression."""
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x, w = torch.randn(4, 8), torch.randn(8)
    with pytest.raises(ArgumentError, match="'x' has dtype torch.float8_e4m3fn"):
        op(x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn))
    with pytest.raises(Error, match="bfloat16.*float32|float32.*bfloat16"):
        op(x.bfloat16(), w)
    with pytest.raises(Error, match="dtype mismatch.*float32 \\* float64"):
        op(x, w.double())
    with pytest.raises(Error, match="'/' on integers"):
        op(torch.ones(4, 8, dtype=torch.int64), torch.ones(8, dtype=torch.int64))
    torch.testing.assert_close(op(x, w), _rmsnorm_eager(x, w))      # the op still works


def test_wrong_shapes_are_einloop_errors():
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x, w = torch.randn(4, 8), torch.randn(8)
    with pytest.raises(Error, match="reads w\\[j\\] out of bounds.*extent 6"):
        op(x, torch.randn(6))                         # w shorter than x's rows
    with pytest.raises(Error, match="shape is empty"):
        et.custom_op(_name("rmsnorm"))(_rmsnorm)(torch.tensor(1.0), w)     # a 0-d tensor
    with pytest.raises(Error, match="has the entry 0"):
        et.custom_op(_name("rmsnorm"))(_rmsnorm)(torch.randn(0, 8), w)     # an empty batch
    torch.testing.assert_close(op(x, w), _rmsnorm_eager(x, w))
    with pytest.raises(ArgumentError, match="'x' has rank 1.*declared for rank 2"):
        op(torch.randn(8), w)


def test_a_first_call_at_a_rank_the_declaration_cannot_take_is_an_einloop_error():
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    with pytest.raises(CustomOpError, match="x: float32\\[8\\].*raised ValueError: not enough "
                                            "values to unpack"):
        op(torch.randn(8), torch.randn(8))


def test_wrong_arguments_are_argument_errors():
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x, w = torch.randn(4, 8), torch.randn(8)
    with pytest.raises(ArgumentError, match="takes 2 tensor\\(s\\) \\(x, w\\), got 3"):
        op(x, w, w)
    with pytest.raises(ArgumentError, match="takes 2 tensor\\(s\\) \\(x, w\\), got 0"):
        op()
    with pytest.raises(ArgumentError, match="'w' must be a torch.Tensor, got ndarray"):
        op(x, w.numpy())
    with pytest.raises(ArgumentError, match="'x' must be a torch.Tensor, got NoneType"):
        op(None, w)
    with pytest.raises(ArgumentError, match="'w' must be a torch.Tensor, got list"):
        op(x, [1.0] * 8)


def test_a_sparse_tensor_is_an_argument_error():
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    with pytest.raises(ArgumentError, match="'x' has layout torch.sparse_coo.*to_dense"):
        op(torch.randn(4, 8).to_sparse(), torch.randn(8))


def test_tensors_by_name_and_mixed_devices():
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x, w = torch.randn(4, 8), torch.randn(8)
    torch.testing.assert_close(op(x, w=w), _rmsnorm_eager(x, w))
    torch.testing.assert_close(op(w=w, x=x), _rmsnorm_eager(x, w))
    with pytest.raises(ArgumentError, match="no parameter 'weight'; its parameters are \\(x, w\\)"):
        op(x, weight=w)
    with pytest.raises(ArgumentError, match="'x' given by position and by name"):
        op(x, w, x=x)
    with pytest.raises(ArgumentError, match="missing tensor\\(s\\) 'w'"):
        op(x=x)
    with pytest.raises(ArgumentError, match="'w' is on meta and 'x' on cpu"):
        op(x, torch.empty(8, device="meta"))


def test_meta_tensors_trace_forward_and_backward_and_cuda_is_refused():
    """Meta tensors are what tracing uses: forward and backward go through the fake
    implementations and give meta tensors of the right shapes.  The real implementations run on
    the CPU only: a CUDA tensor (a stand-in with a CUDA device where PyTorch has no CUDA, the
    only thing they look at before refusing) is an ArgumentError naming the device."""
    import types
    op = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    x = torch.empty(4, 8, device="meta", requires_grad=True)
    w = torch.empty(8, device="meta", requires_grad=True)
    y = op(x, w)
    assert y.device.type == "meta" and y.shape == (4, 8)
    y.sum().backward()
    assert x.grad.device.type == w.grad.device.type == "meta"
    assert x.grad.shape == (4, 8) and w.grad.shape == (8,)
    cuda = types.SimpleNamespace(device=torch.device("cuda", 0))
    with pytest.raises(ArgumentError, match="'x' is on device cuda:0.*run on the CPU"):
        op._run(cuda, torch.randn(8))
    with pytest.raises(ArgumentError, match="'w' is on device cuda:0"):
        op._run_backward([torch.randn(4, 8), cuda], [torch.randn(4, 8)], [], False, [True, True])
    if torch.cuda.is_available():                      # a CUDA build: the real thing
        with pytest.raises(ArgumentError, match="is on device cuda"):
            op(torch.randn(4, 8, device="cuda"), torch.randn(8, device="cuda"))


def test_non_contiguous_views_give_eager_results_forward_and_backward():
    """Offset slices, broadcast (stride 0) rows, transposes and channels-last images, as inputs
    and as the gradient arriving at the output: the results and gradients equal eager's."""
    rms = et.custom_op(_name("rmsnorm"))(_rmsnorm)
    base = torch.randn(6, 11, dtype=torch.float64)
    cases = [
        (base[1:5, 2:10], torch.randn(8, dtype=torch.float64)),                    # offset
        (torch.randn(1, 8, dtype=torch.float64).expand(4, 8),                      # stride 0
         torch.randn(16, dtype=torch.float64)[::2]),                               # step 2
        (torch.randn(8, 4, dtype=torch.float64).t(), torch.randn(8, dtype=torch.float64)),
    ]
    for x, w in cases:
        assert not x.is_contiguous() or not w.is_contiguous()
        xs, ws = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = rms(x, w)
        torch.testing.assert_close(y, _rmsnorm_eager(xs, ws))
        head = torch.randn(8, 4, dtype=torch.float64).t()                           # transposed
        y.backward(head)
        _rmsnorm_eager(xs, ws).backward(head)
        torch.testing.assert_close(x.grad, xs.grad)
        torch.testing.assert_close(w.grad, ws.grad)
    conv = et.custom_op(_name("conv3x3"))(_conv3x3)
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64).to(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    assert not x.is_contiguous()
    x1, w1 = x.detach().requires_grad_(), w.detach().requires_grad_()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y = conv(x1, w1)
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x2, w2))
    y.sum().backward()                                 # the head: ones expanded, stride 0
    torch.nn.functional.conv2d(x2, w2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(w1.grad, w2.grad)


def test_integer_inputs_never_require_grad():
    """PyTorch itself refuses requires_grad on an integer tensor; an operator with an integer
    input differentiates its float inputs and gives the integer one no gradient; an integer
    output of a float input that requires grad is a plain result, not differentiable."""
    with pytest.raises(RuntimeError, match="floating point"):
        torch.ones(3, dtype=torch.int64, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        torch.ones(3, dtype=torch.int32).requires_grad_()

    def masked_scale(x, m):
        return te.compute(x.shape, lambda i: x[i] * m[i].astype(x.dtype), name="ms")

    def rounded(x):
        return te.compute(x.shape, lambda i: (x[i] * 4.0).astype("int32"), name="r")

    scale = et.custom_op(_name("masked_scale"))(masked_scale)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    m = torch.tensor([1, 0, 2, 1, 0, 3], dtype=torch.int32)
    y = scale(x, m)
    torch.testing.assert_close(y, x * m)
    y.backward(torch.arange(6.0, dtype=torch.float64))
    torch.testing.assert_close(x.grad, torch.arange(6.0, dtype=torch.float64) * m)
    assert m.grad is None and not m.requires_grad
    r = et.custom_op(_name("rounded"))(rounded)(x)
    assert r.dtype == torch.int32 and not r.requires_grad
    assert torch.equal(r, (x.detach() * 4).to(torch.int32))
