"""einloop.torch.custom_op(dynamic=...): the dynamic dimensions are te.size_vars, so one kernel
(forward and gradient) serves every batch size; checked against eager PyTorch, gradcheck,
opcheck, torch.compile(dynamic=True) without recompilation, and the tuning log's size dispatch.
Every operator gets a name of its own: torch.library registers a name once per process."""
import itertools
import os
import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import einloop.torch as et
import einloop.torch.gradients as gradients_module
import einloop.torch.op as op_module
from einloop import autotune, te
from einloop.autotune import api
from einloop.autotune.log import record
from einloop.errors import ArgumentError, CustomOpError, TEError
from einloop.runtime.dispatch import DispatchKernel

import test_torch_gradients as zoo
import torch_ops

_ids = itertools.count()


def _name(base):
    return f"einloop_dynamic_test::{base}_{next(_ids)}"


def _rmsnorm_eager(x, w):
    return x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6) * w


def _bmm(a, b):
    """a[b, m, k] @ b[b, k, n]: both inputs carry the batch."""
    nb, m, kk = a.shape
    n = b.shape[2]
    k = te.reduce_axis((0, kk), name="k")
    return te.compute((nb, m, n), lambda z, i, j: te.sum(a[z, i, k] * b[z, k, j], axis=k),
                      name="bmm")


def _softmax(x):
    """Softmax over the last axis of x[b, s, d]."""
    b, s, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    k2 = te.reduce_axis((0, d), name="k2")
    mx = te.compute((b, s), lambda i, j: te.max(x[i, j, k], axis=k), name="mx")
    e = te.compute((b, s, d), lambda i, j, l: te.exp(x[i, j, l] - mx[i, j]), name="e")
    total = te.compute((b, s), lambda i, j: te.sum(e[i, j, k2], axis=k2), name="total")
    return te.compute((b, s, d), lambda i, j, l: e[i, j, l] / total[i, j], name="softmax")


def _column_sum(x):
    n, d = x.shape
    k = te.reduce_axis((0, n), name="k")
    return te.compute((d,), lambda j: te.sum(x[k, j], axis=k), name="colsum")


@pytest.fixture
def builds(monkeypatch):
    """The kernels the operators build: ``{"forward": [...], "gradient": [...]}``, each as
    (kernel name, its tensors' shapes)."""
    built = {"forward": [], "gradient": []}

    def counting(real, kind):
        def build(*args, **kwargs):
            built[kind].append((kwargs.get("name"), tuple(str(t.shape) for t in args[1])))
            return real(*args, **kwargs)
        return build
    monkeypatch.setattr(op_module, "build", counting(op_module.build, "forward"))
    monkeypatch.setattr(gradients_module, "build", counting(gradients_module.build, "gradient"))
    return built


def _each_built_once(builds):
    """Some forward and gradient kernels were built, none twice: the batch sizes after the
    first built nothing (a gradient has several kernels, one per reduction)."""
    for kind in ("forward", "gradient"):
        assert builds[kind], kind
        assert len(set(builds[kind])) == len(builds[kind]), builds[kind]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_kernel_serves_every_batch_size(builds, dtype):
    op = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    w = torch.randn(24, dtype=dtype, requires_grad=True)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else {}
    for n in (1, 3, 16, 17, 300):
        x = torch.randn(n, 24, dtype=dtype, requires_grad=True)
        y = op(x, w)
        assert y.shape == (n, 24) and y.dtype == dtype
        torch.testing.assert_close(y, _rmsnorm_eager(x, w), **tol)
        weight = torch.randn(n, 24, dtype=dtype)
        gx, gw = torch.autograd.grad((y * weight).sum(), (x, w))
        ex, ew = torch.autograd.grad((_rmsnorm_eager(x, w) * weight).sum(), (x, w))
        torch.testing.assert_close(gx, ex, **tol)
        torch.testing.assert_close(gw, ew, **tol)
    _each_built_once(builds)
    ((sig, saving),) = op._kernels          # the forward that saves stages for the backward
    assert saving
    assert sig.shapes == (("x_0", 24), (24,))
    assert isinstance(op._kernels[sig, saving], DispatchKernel)
    # the signature is the dtypes and the static dims: another d is another kernel
    before = len(builds["forward"])
    op(torch.randn(5, 8, dtype=dtype), torch.randn(8, dtype=dtype))
    op(torch.randn(7, 8, dtype=dtype), torch.randn(8, dtype=dtype))
    assert len(builds["forward"]) == before + 1


def test_a_static_operator_still_builds_per_shape(builds):
    op = et.custom_op(_name("rmsnorm"))(torch_ops.rmsnorm)
    w = torch.randn(8)
    for n in (2, 3):
        op(torch.randn(n, 8), w)
    assert len(builds["forward"]) == 2


def test_gradcheck_at_two_batch_sizes(builds):
    op = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    for n in (2, 7):
        x = torch.randn(n, 6, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(op, (x, w))
    _each_built_once(builds)


def test_shared_size_variable_over_two_inputs(builds):
    op = et.custom_op(_name("bmm"), dynamic={"a": {0: "batch"}, "b": {0: "batch"}})(_bmm)
    for nb in (1, 3, 5):
        a = torch.randn(nb, 4, 5, dtype=torch.float64, requires_grad=True)
        b = torch.randn(nb, 5, 3, dtype=torch.float64, requires_grad=True)
        torch.testing.assert_close(op(a, b), a @ b)
        if nb != 5:
            assert torch.autograd.gradcheck(op, (a, b))
    _each_built_once(builds)
    assert op.dynamic.names == ("batch",)
    with pytest.raises(ArgumentError, match="both are the size batch"):
        op(torch.randn(2, 4, 5, dtype=torch.float64), torch.randn(3, 5, 3, dtype=torch.float64))


def test_two_size_variables_of_one_input(builds):
    op = et.custom_op(_name("softmax"), dynamic={"x": (0, 1)})(_softmax)
    for b, s in ((1, 1), (2, 7), (3, 40)):
        x = torch.randn(b, s, 9)
        torch.testing.assert_close(op(x), torch.softmax(x, -1))
    assert len(builds["forward"]) == 1
    assert op.dynamic.names == ("x_0", "x_1")
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x,))


def test_opcheck_at_two_batch_sizes():
    op = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    w = torch.randn(16, requires_grad=True)
    for n in (3, 9):
        torch.library.opcheck(op.torch_op, (torch.randn(n, 16, requires_grad=True), w))


def _compiled_steps(op, backend, sizes, dynamic=True):
    """Compile ``tanh(op(x, w)).sum()`` once, then run forward and backward at every batch
    size in *sizes*, checking against eager; the frames compiled."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    f = torch.compile(lambda x, w: torch.tanh(op(x, w)).sum(), backend=counter,
                      fullgraph=True, dynamic=dynamic)
    w = torch.randn(16, requires_grad=True)
    for n in sizes:
        x = torch.randn(n, 16, requires_grad=True)
        gx, gw = torch.autograd.grad(f(x, w), (x, w))
        ex, ew = torch.autograd.grad(torch.tanh(_rmsnorm_eager(x, w)).sum(), (x, w))
        torch.testing.assert_close(gx, ex, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(gw, ew, rtol=1e-4, atol=1e-5)
    return counter.frame_count


def test_torch_compile_dynamic_does_not_recompile_across_batch_sizes():
    sizes = (3, 5, 9, 40)
    dynamic = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    assert _compiled_steps(dynamic, "aot_eager", sizes) == 1
    assert len(dynamic._kernels) == 1 and len(dynamic._gradients) == 1
    # a static operator specialises the graph on each batch size: a recompilation each
    static = et.custom_op(_name("rmsnorm"))(torch_ops.rmsnorm)
    assert _compiled_steps(static, "aot_eager", sizes) == len(sizes)


def test_inductor_traces_symbolic_sizes_through_the_fake():
    op = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    seen = []

    def backend(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and "einloop_dynamic_test" in str(node.target):
                seen.append(node.meta["example_value"][0].shape[0])
        return gm.forward
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: op(x, w) * 2, backend=backend, fullgraph=True)
    w = torch.randn(16)
    for n in (3, 5, 9):
        x = torch.randn(n, 16)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(f(x, w), _rmsnorm_eager(x, w) * 2)
    assert len(seen) == 1 and isinstance(seen[0], torch.SymInt)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    g = torch.compile(lambda x, w: op(x, w) + 1, backend=counter, fullgraph=True, dynamic=True)
    for n in (4, 6, 33):
        x = torch.randn(n, 16)
        torch.testing.assert_close(g(x, w), _rmsnorm_eager(x, w) + 1, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1


def test_a_static_dimension_too_short_for_the_dynamic_one_is_an_error():
    """Only q's batch is dynamic (dynamic=True): k keeps a static batch, read along q's.  The
    symbolic kernel would clamp that read; each new size is declared statically first, so a k
    shorter than q is the static declaration's TEError, never a clamped result."""
    def scaled(q, k):
        return te.compute(q.shape, lambda b, i: q[b, i] * k[b, i], name="qk")
    op = et.custom_op(_name("scaled"), dynamic=True)(scaled)
    q, k = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(op(q, k), q * k)
    with pytest.raises(TEError, match="out of bounds"):
        op(torch.randn(6, 3), torch.randn(4, 3))
    torch.testing.assert_close(op(q[:2], k), q[:2] * k[:2])   # k longer: read within bounds


def test_empty_batches():
    op = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    x = torch.randn(0, 8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    y = op(x, w)
    assert y.shape == (0, 8)
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    assert gx.shape == (0, 8) and torch.equal(gw, torch.zeros(8))
    colsum = et.custom_op(_name("colsum"), dynamic=True)(_column_sum)
    x = torch.randn(5, 3)
    torch.testing.assert_close(colsum(x), x.sum(0))
    with pytest.raises(ArgumentError, match="x_0 is 0.*'colsum' is not empty"):
        colsum(torch.randn(0, 3))


def test_bad_dynamic_options():
    with pytest.raises(CustomOpError, match="not a parameter"):
        et.custom_op(_name("bad"), dynamic={"y": 0})(torch_ops.rmsnorm)
    with pytest.raises(CustomOpError, match="must be True, False or a dict"):
        et.custom_op(_name("bad"), dynamic="x")(torch_ops.rmsnorm)
    with pytest.raises(CustomOpError, match="a dimension is an int"):
        et.custom_op(_name("bad"), dynamic={"x": ("0",)})(torch_ops.rmsnorm)
    with pytest.raises(CustomOpError, match="is an identifier"):
        et.custom_op(_name("bad"), dynamic={"x": {0: "n rows"}})(torch_ops.rmsnorm)
    with pytest.raises(CustomOpError, match="also a parameter"):
        et.custom_op(_name("bad"), dynamic={"x": {0: "w"}})(torch_ops.rmsnorm)
    op = et.custom_op(_name("rank"), dynamic={"w": 1})(torch_ops.rmsnorm)
    with pytest.raises(ArgumentError, match="dynamic dimension 1 of 'w'.*rank 1"):
        op(torch.randn(2, 4), torch.randn(4))
    op = et.custom_op(_name("twice"), dynamic={"x": (0, -2)})(torch_ops.rmsnorm)
    with pytest.raises(ArgumentError, match="dimension 0 of 'x' twice"):
        op(torch.randn(2, 4), torch.randn(4))

    def halves(x):
        n, d = x.shape
        return te.compute((n // 2, d), lambda i, j: x[2 * i, j], name="h")
    op = et.custom_op(_name("halves"), dynamic=True)(halves)
    with pytest.raises(TEError, match="dynamic dimensions as size variables \\(x_0\\)"):
        op(torch.randn(4, 3))


def test_tuned_at_two_batch_sizes_then_replayed_by_size(tmp_path, monkeypatch):
    log = str(tmp_path / "rmsnorm.jsonl")
    op = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    x, w = torch.randn(16, 32), torch.randn(32)
    tuned = et.tune(op, (x, w), n_trial=10, log=log, seed=0, quiet=True,
                    shape_hints={"x_0": [8, 32]})
    labels = [label for label, _ in tuned]
    assert labels[:2] == ["forward", "forward saving ss"], labels
    assert len(labels) > 2 and all(lb.startswith("gradient kernel") for lb in labels[2:])
    records = record.load(log)
    assert {tuple(map(tuple, r.size_point["sizes"])) for r in records if r.ok} \
        >= {(("x_0", 8),), (("x_0", 32),)}

    def no_tuning(*args, **kwargs):
        raise AssertionError("the custom op tuned instead of replaying the log")
    monkeypatch.setattr(api, "make_tuner", no_tuning)
    monkeypatch.setattr(api, "tune", no_tuning)
    replayed = et.custom_op(_name("rmsnorm"), dynamic=True, log=log)(torch_ops.rmsnorm)
    with warnings.catch_warnings():
        warnings.simplefilter("error", autotune.UntunedScheduleWarning)    # the log has both
        for n in (3, 8, 100):
            x = torch.randn(n, 32, requires_grad=True)
            wg = w.clone().requires_grad_()
            y = replayed(x, wg)
            torch.testing.assert_close(y, _rmsnorm_eager(x, wg), rtol=1e-5, atol=1e-5)
            gx, _ = torch.autograd.grad(y.sum(), (x, wg))
            ex, _ = torch.autograd.grad(_rmsnorm_eager(x, wg).sum(), (x, wg))
            torch.testing.assert_close(gx, ex, rtol=1e-4, atol=1e-4)
    (kernel,) = replayed._kernels.values()
    # the tuned sizes, and the power of two between them that the cross-size round measured
    assert {(8,), (32,)} <= {sizes for sizes, _ in kernel.cases} <= {(8,), (16,), (32,)}


def test_tune_shape_hints_errors(tmp_path):
    dynamic = et.custom_op(_name("rmsnorm"), dynamic=True)(torch_ops.rmsnorm)
    static = et.custom_op(_name("rmsnorm"))(torch_ops.rmsnorm)
    args = (torch.randn(4, 8), torch.randn(8))
    log = str(tmp_path / "x.jsonl")
    with pytest.raises(CustomOpError, match="over x_0"):
        et.tune(dynamic, args, n_trial=2, log=log, shape_hints={"n": [4]})
    with pytest.raises(CustomOpError, match="dynamic="):
        et.tune(static, args, n_trial=2, log=log, shape_hints={"x_0": [4]})
    assert not os.path.exists(log)


def test_a_log_without_the_dynamic_kernel_warns_and_runs_the_default(tmp_path):
    log = str(tmp_path / "other.jsonl")
    et.tune(et.custom_op(_name("rmsnorm"))(torch_ops.rmsnorm),       # the static kernel only
            (torch.randn(4, 8), torch.randn(8)), n_trial=2, log=log, seed=0, quiet=True,
            backward=False)
    op = et.custom_op(_name("rmsnorm"), dynamic=True, log=log)(torch_ops.rmsnorm)
    x, w = torch.randn(5, 8), torch.randn(8)
    with pytest.warns(autotune.UntunedScheduleWarning, match="no schedule of the kernel"):
        y = op(x, w)
    torch.testing.assert_close(y, _rmsnorm_eager(x, w), rtol=1e-5, atol=1e-5)


#: the dynamic dims of the gradient zoo's operators (tests/torch/test_torch_gradients.py): the
#: batch, or a size its inputs share (silu_mul's rows, attention's sequence)
ZOO_DYNAMIC = {
    "rmsnorm": True, "matmul_bias_gelu": True, "softmax": True, "conv2d_stride2_pad2_dilation2": True,
    "silu_mul": {"a": {0: "n"}, "b": {0: "n"}}, "batch_matmul": {"a": {0: "nb"}, "b": {0: "nb"}},
    "log_softmax": True, "layer_norm": True, "max_pool_2x2": True, "avg_pool_3x3_pad1": True,
    "depthwise_conv": True, "small_attention": {"q": {0: "s"}, "k": {0: "s"}, "v": {0: "s"}}}



def test_the_dynamic_zoo_names_operators_of_the_zoo():
    assert set(ZOO_DYNAMIC) <= {c.fn.__name__ for c in zoo.CASES}


@pytest.mark.parametrize("fn, shapes, eager", [
    pytest.param(c.fn, c.inputs, c.eager, id=c.fn.__name__)
    for c in zoo.CASES if c.fn.__name__ in ZOO_DYNAMIC])
def test_gradient_zoo_with_a_dynamic_batch(fn, shapes, eager, builds):
    op = et.custom_op(_name(fn.__name__), dynamic=ZOO_DYNAMIC[fn.__name__])(fn)
    for extra in (0, 3):
        g = torch.Generator().manual_seed(extra)
        args = []
        for i, shape in enumerate(shapes):
            dims = op.dynamic.of_input(i, len(shape))
            shape = tuple(v + extra if d in dims else v for d, v in enumerate(shape))
            args.append(torch.randn(shape, dtype=torch.float64, generator=g, requires_grad=True))
        torch.testing.assert_close(op(*args), eager(*args))
        assert torch.autograd.gradcheck(lambda *a: op(*a), args)
    _each_built_once(builds)


def test_the_avg_pool_gradient_on_a_symbolic_batch():
    """A read the declaration clamps itself is clamped again on a symbolic shape: te.gradient
    strips both clamps (it once stripped one and refused the other as not affine)."""
    for n in (2, te.size_var("n")):
        x = te.placeholder((n, 2, 4, 5), "float64", "x")
        (gx,) = te.gradient(zoo.avg_pool_3x3_pad1(x), [x])
        assert tuple(gx.shape) == (n, 2, 4, 5)
