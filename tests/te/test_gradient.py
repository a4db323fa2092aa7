"""te.gradient against central finite differences in float64: each gradient DAG is built with
einloop (default schedule, and the auto-scheduler's untuned schedule) and compared with the
derivative of sum(head * output) computed from the forward kernel."""
import math
import warnings

import numpy as np
import pytest

from einloop import te, build, create_schedule, lower, autotune
from einloop.errors import TEError
from einloop.te.dag import ComputeDAG

F = "float64"


def _kernel(outs):
    """Build *outs* with the default schedule: (run(arrays by placeholder) -> arrays, args)."""
    ins = list(ComputeDAG(outs).inputs)
    f = build(create_schedule(outs), ins + list(outs))

    def run(values):
        res = [np.zeros(t.shape, t.dtype) for t in outs]
        f(*[values[t] for t in ins], *res)
        return res
    return run


def _numeric(out, inputs, head, values, eps=1e-6):
    fwd = _kernel([out])
    grads = []
    for x in inputs:
        g = np.zeros(x.shape)
        for idx in np.ndindex(*x.shape):
            vals = dict(values)
            plus, minus = values[x].copy(), values[x].copy()
            plus[idx] += eps
            minus[idx] -= eps
            vals[x] = plus
            up = np.sum(values[head] * fwd(vals)[0])
            vals[x] = minus
            down = np.sum(values[head] * fwd(vals)[0])
            g[idx] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


def check(out, inputs, values=None, seed=0, positive=False, rtol=1e-5, auto=True):
    """Compare te.gradient(out, inputs, head) with finite differences; returns the grads."""
    rng = np.random.default_rng(seed)
    head = te.placeholder(out.shape, F, name="head")
    values = dict(values or {})
    for x in ComputeDAG([out]).inputs:
        if x not in values:
            lo = 0.5 if positive else -1.0
            values[x] = rng.uniform(lo, 1.5 if positive else 1.0, x.shape).astype(x.dtype)
    values[head] = rng.uniform(-1, 1, out.shape)
    grads = te.gradient(out, inputs, head)
    assert [g.shape for g in grads] == [x.shape for x in inputs]
    got = _kernel(grads)(values)
    want = _numeric(out, inputs, head, values)
    for x, g, w in zip(inputs, got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=f"d/d{x.name}")
    if auto:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s, args = autotune.auto_schedule(list(ComputeDAG(grads).inputs) + grads)
        f = build(s, args)
        res = [np.zeros(t.shape, t.dtype) for t in args[len(args) - len(grads):]]
        f(*[values[t] for t in args[:len(args) - len(grads)]], *res)
        for x, g, w in zip(inputs, res, got):
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9,
                                       err_msg=f"auto-scheduled d/d{x.name}")
    return grads


def test_elementwise_arith():
    A = te.placeholder((3, 4), F, name="A")
    B = te.placeholder((3, 4), F, name="B")
    C = te.compute((3, 4), lambda i, j: (A[i, j] * B[i, j] - A[i, j] / B[i, j]) + (-A[i, j]) * 2.0,
                   name="C")
    check(C, [A, B], positive=True)


@pytest.mark.parametrize("fn", [te.exp, te.log, te.sqrt, te.tanh, te.sigmoid, te.erf, te.abs,
                                lambda x: te.pow(x, 1.7), lambda x: te.pow(1.3, x),
                                lambda x: te.maximum(x, 0.9), lambda x: te.minimum(x * x, 1.0),
                                lambda x: te.floor(x) + x])
def test_intrinsics(fn):
    A = te.placeholder((5,), F, name="A")
    C = te.compute((5,), lambda i: fn(A[i]), name="C")
    check(C, [A], positive=True)


def test_pow_of_two_inputs_and_casts():
    A = te.placeholder((4,), F, name="A")
    B = te.placeholder((4,), "float32", name="B")
    C = te.compute((4,), lambda i: te.pow(A[i], B[i].astype(F)),
                   name="C")
    g = te.gradient(C, [A, B])
    assert g[1].dtype == "float32"
    check(C, [A], positive=True)


def test_cast_to_float32_output():
    A = te.placeholder((6,), F, name="A")
    C = te.compute((6,), lambda i: (te.exp(A[i]) * 2.0).astype("float32"), name="C")
    (g,) = te.gradient(C, [A])
    f = build(create_schedule([g]), [A, g])
    a = np.linspace(-1, 1, 6)
    out = np.zeros(6)
    f(a, out)
    np.testing.assert_allclose(out, 2 * np.exp(a), rtol=1e-6)   # the adjoint is float32


def test_if_then_else_sends_the_gradient_to_the_taken_branch():
    A = te.placeholder((6,), F, name="A")
    B = te.placeholder((6,), F, name="B")
    C = te.compute((6,), lambda i: te.if_then_else(A[i] > B[i], A[i] * A[i], 3.0 * B[i]),
                   name="C")
    check(C, [A, B])


def test_multi_stage_accumulates_every_consumer():
    A = te.placeholder((3, 4), F, name="A")
    T = te.compute((3, 4), lambda i, j: te.tanh(A[i, j]), name="T")
    U = te.compute((3, 4), lambda i, j: T[i, j] * A[i, j], name="U")
    V = te.compute((3, 4), lambda i, j: U[i, j] + T[i, j] * 2.0 + te.exp(U[i, j]), name="V")
    check(V, [A])


def test_gradient_with_respect_to_a_stage_and_an_unused_input():
    A = te.placeholder((3,), F, name="A")
    B = te.placeholder((3,), F, name="B")
    T = te.compute((3,), lambda i: A[i] * 2.0, name="T")
    C = te.compute((3,), lambda i: T[i] * T[i], name="C")
    gT, gB = te.gradient(C, [T, B])
    f = build(create_schedule([gT, gB]), [A, gT, gB])
    a = np.array([1.0, 2.0, 3.0])
    outs = [np.full(3, np.nan), np.full(3, np.nan)]
    f(a, *outs)
    np.testing.assert_allclose(outs[0], 2 * (2 * a))
    np.testing.assert_array_equal(outs[1], 0)


def test_default_head_is_ones():
    A = te.placeholder((2, 3), F, name="A")
    k = te.reduce_axis((0, 3), name="k")
    S = te.compute((2,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="S")
    (g,) = te.gradient(S, [A])
    a = np.arange(6.0).reshape(2, 3)
    out = np.zeros((2, 3))
    build(create_schedule([g]), [A, g])(a, out)
    np.testing.assert_allclose(out, 2 * a)
