"""A custom op's plain eager call runs its kernel without PyTorch's dispatcher, a differentiated
one through an autograd.Function whose backward skips it too; every call that PyTorch must see
(modes, tracing, profiling, meta tensors) still goes through it, forward and backward."""
import itertools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import einloop.torch as et
from einloop import te

_ids = itertools.count()


def _scale(x):
    return te.compute(x.shape, lambda i, j: x[i, j] * 3.0 + 1.0, name="y")


@pytest.fixture
def counted():
    """A fresh operator whose dispatcher entry counts its calls."""
    op = et.custom_op(f"einloop_call_test::scale_{next(_ids)}")(_scale)
    calls = []

    def counting(through):
        def overload(*args):
            calls.append(args)
            return through(*args)
        return overload
    # the operator, the forward that saves stages for a backward (a call with a gradient), and
    # the backward
    op._overload = counting(op._overload)
    op._training_overload = counting(op._training_overload)
    op._backward_overload = counting(op._backward_overload)
    return op, calls


def test_a_plain_eager_call_skips_the_dispatcher_and_computes_the_same(counted):
    op, calls = counted
    x = torch.randn(33, 70)
    torch.testing.assert_close(op(x), x * 3 + 1)
    with torch.no_grad():          # a tensor that requires grad, with nothing to record
        w = torch.nn.Parameter(torch.randn(5, 6))
        torch.testing.assert_close(op(w), w.detach() * 3 + 1)
    leaf = x.clone().requires_grad_()                   # a gradient to record
    y = op(leaf)
    assert y.grad_fn is not None
    (y * y).sum().backward()
    torch.testing.assert_close(leaf.grad, 2 * (x * 3 + 1) * 3)
    assert calls == []
    torch.testing.assert_close(op.torch_op(x)[0], op(x))    # what the dispatcher gives


class _Watch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_calls_pytorch_must_see_go_through_the_dispatcher(counted):
    op, calls = counted
    x = torch.randn(8, 16)

    def through(case):
        before = len(calls)
        result = case()
        assert len(calls) > before, case
        return result

    leaf = x.clone().requires_grad_()
    with _Watch() as watch:                             # a dispatch mode watching ops
        through(lambda: op(x))
        y = through(lambda: op(leaf))                   # a gradient to record, and its backward
        before = len(calls)
        y.sum().backward()
        assert len(calls) > before
    torch.testing.assert_close(leaf.grad, torch.full_like(x, 3.0))
    assert any(s.startswith(op.name.replace("::", ".")) for s in watch.seen), watch.seen
    assert any(s.startswith(op.name.replace("::", ".") + "_backward") for s in watch.seen)
    with torch.profiler.profile() as prof:              # the profiler records the op
        through(lambda: op(x))
    assert any(op.name in e.name for e in prof.events()), [e.name for e in prof.events()]
    meta = through(lambda: op(torch.empty(8, 16, device="meta")))   # the fake implementation
    assert meta.device.type == "meta" and meta.shape == (8, 16)
    with torch.device("meta"):                          # a TorchFunctionMode
        through(lambda: op(x))
    traced = through(lambda: torch.jit.trace(lambda t: op(t), x))   # the trace records the op
    torch.testing.assert_close(traced(x + 1), (x + 1) * 3 + 1)


def _rowsum(x, w):
    k = te.reduce_axis((0, x.shape[1]), name="k")
    s = te.compute((x.shape[0],), lambda i: te.sum(x[i, k] * w[k], axis=k), name="s")
    return te.compute(x.shape, lambda i, j: x[i, j] * s[i], name="y")


def test_kernels_run_on_the_tensors_memory_whatever_their_layout():
    """Transposed views, views at an offset that is not aligned to the element (copied first)
    and Parameters: the forward and the gradients equal eager PyTorch's."""
    op = et.custom_op(f"einloop_call_test::rowsum_{next(_ids)}")(_rowsum)
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g, dtype=torch.float64)
    raw = bytearray(8 * 5 + 3)
    w = torch.frombuffer(raw, dtype=torch.float64, offset=3, count=5)   # misaligned by 3 bytes
    assert w.data_ptr() % 8
    w.copy_(torch.randn(5, generator=g, dtype=torch.float64))
    x = base.t().contiguous().t()                                 # column-major: not contiguous
    assert not x.is_contiguous()
    weight = torch.nn.Parameter(w.clone())

    def eager(x, w):
        return x * (x @ w)[:, None]
    torch.testing.assert_close(op(x, w), eager(x, w))
    with torch.no_grad():
        torch.testing.assert_close(op(x, weight), eager(x, weight))
    xs = x.detach().requires_grad_()
    op(xs, weight).sum().backward()
    xe, we = x.detach().requires_grad_(), weight.detach().clone().requires_grad_()
    eager(xe, we).sum().backward()
    torch.testing.assert_close(xs.grad, xe.grad)
    torch.testing.assert_close(weight.grad, we.grad)


def test_the_backward_operator_refuses_tensors_that_do_not_fit():
    """Called directly with a head of the wrong shape, dtype or device, the backward operator
    raises einloop's ArgumentError naming it: never a read out of bounds."""
    from einloop.errors import ArgumentError
    op = et.custom_op(f"einloop_call_test::rowsum_{next(_ids)}")(_rowsum)
    x, w = torch.randn(6, 5), torch.randn(5)
    outs, saved = op.training_op(x, w)
    for head in [torch.randn(6, 4), torch.randn(6, 5, dtype=torch.float64), torch.randn(3, 5)]:
        with pytest.raises(ArgumentError, match="y_grad"):
            op.backward_op([x, w], [head], [*outs, *saved], True, [True, True])
    assert [t.shape for t in saved] == [(6,)]              # the row sums s, saved
    with pytest.raises(ArgumentError, match="must be torch.float32 of shape"):
        op.backward_op([x, w], [torch.randn(6, 5)], [*outs, torch.randn(7)], True, [True, True])


def test_call_addresses_refuses_a_kernel_with_size_variables():
    from einloop import build, create_schedule
    from einloop.errors import ArgumentError
    n = te.size_var("n")
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: x[i] + 1.0, name="y")
    kernel = build(create_schedule(y), [x, y])
    with pytest.raises(ArgumentError, match="size variables"):
        kernel.call_addresses([0, 0])


def _affine(x, w):
    return te.compute(x.shape, lambda i, j: x[i, j] * w[j] + w[j], name="y")


def test_plain_calls_are_resolved_once_per_signature_and_backward_plan():
    """A plain eager call at a static signature is looked up by its tensors' dtypes and shapes
    once, and its backward by the gradients asked for: the second step of a training loop
    resolves nothing again, a frozen weight resolves a plan of its own, and every step's
    gradients are right, whatever the head's layout (a sum's broadcast head, a transposed one)."""
    op = et.custom_op(f"einloop_call_test::affine_{next(_ids)}")(_affine)
    x0, w0 = torch.randn(9, 21), torch.randn(21)
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    for step in range(2):
        x.grad = w.grad = None
        op(x, w).sum().backward()
        torch.testing.assert_close(x.grad, w0.expand(9, 21))
        torch.testing.assert_close(w.grad, (x0 + 1).sum(0))
    assert len(op._plain_calls) == 1
    plain = next(iter(op._plain_calls.values()))
    assert len(plain.gradients._programs) == 1
    head = torch.randn(21, 9).t()                       # not contiguous
    frozen = w0.clone()
    x.grad = None
    op(x, frozen).backward(head)
    torch.testing.assert_close(x.grad, head * w0)
    assert len(plain.gradients._programs) == 2          # only x's gradient: a plan of its own
    with torch.no_grad():
        torch.testing.assert_close(op(x0, w0), x0 * w0 + w0)
    assert len(op._plain_calls) == 2                    # the forward that saves nothing


def test_a_dynamic_operator_has_no_static_plain_call():
    op = et.custom_op(f"einloop_call_test::affine_dyn_{next(_ids)}", dynamic=True)(_affine)
    x, w = torch.randn(5, 21, requires_grad=True), torch.randn(21, requires_grad=True)
    assert op.plain_call([x, w], saving=True) is None
    op(x, w).sum().backward()
    torch.testing.assert_close(w.grad, (x.detach() + 1).sum(0))
    assert op._plain_calls == {}
