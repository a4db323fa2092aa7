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
