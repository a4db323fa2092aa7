"""te.gradient against central finite differences in float64: each gradient DAG is built with
einloop (default schedule, and the auto-scheduler's untuned schedule) and compared with the
derivative of sum(head * output) computed from the forward kernel."""
import math
import warnings

import numpy as np
import pytest

from einloop import te, build, create_schedule, lower, autotune
from einloop.errors import TEError
from einloop.ir.stmt import Store
from einloop.ir.visit import walk_stmt
from einloop.te.dag import ComputeDAG

import gather_form

F = "float64"


def _kernel(outs, schedule=None):
    """Build *outs* with the default schedule, or what *schedule(s)* makes of it: run(arrays by
    placeholder) -> arrays."""
    ins = list(ComputeDAG(outs).inputs)
    s = create_schedule(outs)
    if schedule is not None:
        schedule(s)
    f = build(s, ins + list(outs))

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


def test_gradient_of_the_output_itself_is_the_head():
    A = te.placeholder((2,), F, name="A")
    C = te.compute((2,), lambda i: A[i] * 3.0, name="C")
    gC, gA = te.gradient(C, [C, A])
    out = [np.zeros(2), np.zeros(2)]
    build(create_schedule([gC, gA]), [gC, gA])(*out)
    np.testing.assert_array_equal(out, [[1, 1], [3, 3]])


def test_default_head_is_ones():
    A = te.placeholder((2, 3), F, name="A")
    k = te.reduce_axis((0, 3), name="k")
    S = te.compute((2,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="S")
    (g,) = te.gradient(S, [A])
    a = np.arange(6.0).reshape(2, 3)
    out = np.zeros((2, 3))
    build(create_schedule([g]), [A, g])(a, out)
    np.testing.assert_allclose(out, 2 * a)


# reductions -----------------------------------------------------------------------------------

def matmul(n=3, m=4, kk=5):
    A = te.placeholder((n, kk), F, name="A")
    B = te.placeholder((kk, m), F, name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_matmul():
    A, B, C = matmul()
    check(C, [A, B])


def test_batched_matmul_with_transposed_operand():
    A = te.placeholder((2, 3, 4), F, name="A")
    B = te.placeholder((2, 5, 4), F, name="B")
    k = te.reduce_axis((0, 4), name="k")
    C = te.compute((2, 3, 5), lambda b, i, j: te.sum(A[b, i, k] * B[b, j, k], axis=k), name="C")
    check(C, [A, B])


def test_transpose_and_broadcast():
    A = te.placeholder((3, 4), F, name="A")
    v = te.placeholder((3,), F, name="v")
    C = te.compute((4, 3), lambda i, j: A[j, i] * v[j] + v[j], name="C")
    check(C, [A, v])


def test_reduction_over_several_axes():
    A = te.placeholder((2, 3, 4), F, name="A")
    j = te.reduce_axis((0, 3), name="j")
    k = te.reduce_axis((0, 4), name="k")
    C = te.compute((2,), lambda i: te.sum(A[i, j, k] * A[i, j, k] * (k + 1).astype(F),
                                          axis=[j, k]), name="C")
    check(C, [A])


def softmax(n=3, d=5):
    X = te.placeholder((n, d), F, name="X")
    m = te.reduce_axis((0, d), name="m")
    k = te.reduce_axis((0, d), name="k")
    Ex = te.compute((n, d), lambda i, j: te.exp(X[i, j] - te.max(X[i, m], axis=m)), name="Ex")
    Y = te.compute((n, d), lambda i, j: Ex[i, j] / te.sum(Ex[i, k], axis=k), name="Y")
    return X, Y


def test_softmax():
    X, Y = softmax()
    check(Y, [X])


def test_log_softmax():
    X = te.placeholder((3, 5), F, name="X")
    m = te.reduce_axis((0, 5), name="m")
    k = te.reduce_axis((0, 5), name="k")
    M = te.compute((3,), lambda i: te.max(X[i, m], axis=m), name="M")
    S = te.compute((3,), lambda i: te.sum(te.exp(X[i, k] - M[i]), axis=k), name="S")
    Y = te.compute((3, 5), lambda i, j: X[i, j] - M[i] - te.log(S[i]), name="Y")
    check(Y, [X])


def test_layer_norm():
    n, d = 3, 6
    X = te.placeholder((n, d), F, name="X")
    g = te.placeholder((d,), F, name="g")
    b = te.placeholder((d,), F, name="b")
    k = te.reduce_axis((0, d), name="k")
    k2 = te.reduce_axis((0, d), name="k2")
    mean = te.compute((n,), lambda i: te.sum(X[i, k], axis=k) / float(d), name="mean")
    var = te.compute((n,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]),
                                            axis=k2) / float(d), name="var")
    Y = te.compute((n, d), lambda i, j: (X[i, j] - mean[i]) / te.sqrt(var[i] + 1e-5) * g[j]
                   + b[j], name="Y")
    check(Y, [X, g, b])


def test_rmsnorm_as_in_the_issue():
    n, d = 3, 5
    x = te.placeholder((n, d), F, name="x")
    w = te.placeholder((d,), F, name="w")
    k = te.reduce_axis((0, d), name="k")
    ss = te.compute((n,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="ss")
    y = te.compute((n, d), lambda i, j: x[i, j] / te.sqrt(ss[i] / d + 1e-6) * w[j], name="y")
    check(y, [x, w])


def test_gelu_and_silu():
    X = te.placeholder((7,), F, name="X")
    gelu = te.compute((7,), lambda i: 0.5 * X[i] * (1.0 + te.erf(X[i] * (1 / math.sqrt(2)))),
                      name="gelu")
    check(gelu, [X])
    silu = te.compute((7,), lambda i: X[i] * te.sigmoid(X[i]), name="silu")
    check(silu, [X])


def test_swiglu():
    X = te.placeholder((2, 4), F, name="X")
    W1 = te.placeholder((4, 3), F, name="W1")
    W3 = te.placeholder((4, 3), F, name="W3")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((2, 3), lambda i, j: te.sum(X[i, k] * W1[k, j], axis=k), name="Y")
    k3 = te.reduce_axis((0, 4), name="k3")
    Z = te.compute((2, 3), lambda i, j: Y[i, j] * te.sigmoid(Y[i, j])
                   * te.sum(X[i, k3] * W3[k3, j], axis=k3), name="Z")
    # its gradient DAG (three outputs, four GEMMs) has a space larger than sys.maxsize
    check(Z, [X, W1, W3])


def test_if_then_else_padding_read():
    A = te.placeholder((5,), F, name="A")
    P = te.compute((9,), lambda i: te.if_then_else(te.all(i >= 2, i < 7), A[i - 2], 0.0),
                   name="P")
    C = te.compute((9,), lambda i: P[i] * P[i], name="C")
    check(C, [A])


def test_conv1d_window_stride_and_padding():
    A = te.placeholder((2, 9), F, name="A")
    W = te.placeholder((3, 2, 3), F, name="W")
    pad = te.compute((2, 11), lambda c, i: te.if_then_else(te.all(i >= 1, i < 10),
                                                          A[c, i - 1], 0.0), name="pad")
    c = te.reduce_axis((0, 2), name="c")
    r = te.reduce_axis((0, 3), name="r")
    out = te.compute((3, 5), lambda o, x: te.sum(pad[c, 2 * x + r] * W[o, c, r], axis=[c, r]),
                     name="out")
    check(out, [A, W])


def test_gradient_axes_are_named_apart_from_the_reduce_axes_they_meet():
    """A gradient stage's data axes are named p, q, r, ...; a reduce axis the forward named r
    (a conv1d's taps) stays summed in it.  The two must not share a name: the auto-scheduler
    tells loops apart by name (it failed to tile such a stage under strict rules)."""
    A = te.placeholder((2, 3, 7), F, name="A")
    W = te.placeholder((4, 3, 3), F, name="W")
    c = te.reduce_axis((0, 3), name="c")
    r = te.reduce_axis((0, 3), name="r")
    out = te.compute((2, 4, 7), lambda n, o, t: te.sum(
        A[n, c, t + r - 1] * W[o, c, r], axis=[c, r], where=te.all(t + r >= 1, t + r < 8)),
        name="conv1d")
    grads = check(out, [A, W])
    for g in grads:
        for op in ComputeDAG([g]).compute_ops:
            names = [iv.name for iv in (*op.axis, *op.reduce_axis)]
            assert len(set(names)) == len(names), (op.name, names)
    k = te.reduce_axis((0, 3), name="k")
    M = te.compute((2, 3, 5), lambda i, j, l: te.max(A[i, j, l + k], axis=k), name="M")
    (g,) = check(M, [A])
    for op in ComputeDAG([g]).compute_ops:
        names = [iv.name for iv in (*op.axis, *op.reduce_axis)]
        assert len(set(names)) == len(names), (op.name, names)


def conv2d(cin, cout, size, k, dilation=1, name="out"):
    """A valid (unpadded) conv2d of a 1 x *cin* x *size* x *size* input: ``(A, W, out)``."""
    A = te.placeholder((1, cin, size, size), F, name="A")
    W = te.placeholder((cout, cin, k, k), F, name="W")
    c = te.reduce_axis((0, cin), name="c")
    rh = te.reduce_axis((0, k), name="rh")
    rw = te.reduce_axis((0, k), name="rw")
    side = size - dilation * (k - 1)
    out = te.compute((1, cout, side, side), lambda n, o, h, w: te.sum(
        A[n, c, h + dilation * rh, w + dilation * rw] * W[o, c, rh, rw], axis=[c, rh, rw]),
        name=name)
    return A, W, out


def test_conv2d_dilated():
    A, W, out = conv2d(2, 2, 6, 2, dilation=2)
    check(out, [A, W])


def test_max_reduction_and_pooling_split_ties_evenly():
    A = te.placeholder((2, 6), F, name="A")
    r = te.reduce_axis((0, 2), name="r")
    P = te.compute((2, 3), lambda i, j: te.max(A[i, 2 * j + r], axis=r), name="P")
    check(P, [A])
    r2 = te.reduce_axis((0, 6), name="r2")
    M = te.compute((2,), lambda i: te.min(A[i, r2], axis=r2), name="M")
    check(M, [A])
    (g,) = te.gradient(P, [A])
    a = np.array([[1.0, 1.0, 2.0, 0.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0, 5.0, 4.0]])
    out = np.zeros((2, 6))
    build(create_schedule([g]), [A, g])(a, out)
    np.testing.assert_array_equal(out, [[0.5, 0.5, 1, 0, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5, 1, 0]])


def test_max_pool_whose_padding_is_a_where():
    """A max reduction whose where= keeps the window inside the input (a padded max-pool, as
    torch's, where the padding never wins): the tie count reads the input only where the
    forward did."""
    A = te.placeholder((1, 2, 5, 6), F, name="A")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    P = te.compute((1, 2, 3, 3), lambda n, c, y, x: te.max(
        A[n, c, 2 * y + ry - 1, 2 * x + rx - 1], axis=[ry, rx],
        where=te.all(2 * y + ry >= 1, 2 * y + ry < 6, 2 * x + rx >= 1, 2 * x + rx < 7)),
        name="P")
    check(P, [A])
    r = te.reduce_axis((0, 4), name="k")
    M = te.compute((2, 5), lambda c, i: te.min(A[0, c, i + r - 2, 0], axis=r,
                                               where=te.all(i + r >= 2, i + r < 7)), name="M")
    check(M, [A])


def test_prod_reduction_with_a_zero_factor():
    A = te.placeholder((3, 4), F, name="A")
    k = te.reduce_axis((1, 4), name="k")
    P = te.compute((3,), lambda i: te.prod(A[i, k] * 2.0, axis=k, where=k != 2), name="P")
    check(P, [A])
    (g,) = te.gradient(P, [A])
    a = np.array([[1.0, 2.0, 3.0, 0.0]] * 3)
    out = np.full((3, 4), np.nan)
    build(create_schedule([g]), [A, g])(a, out)
    np.testing.assert_array_equal(out[0], [0, 0, 0, 2 * 2 * 2.0])


def test_avg_pool_with_where():
    A = te.placeholder((7,), F, name="A")
    r = te.reduce_axis((0, 3), name="r")
    P = te.compute((3,), lambda i: te.sum(A[2 * i + r] * (1 / 3), axis=r, where=2 * i + r < 6),
                   name="P")
    check(P, [A])


def test_attention():
    S, D = 3, 2
    Q = te.placeholder((S, D), F, name="Q")
    K = te.placeholder((S, D), F, name="K")
    V = te.placeholder((S, D), F, name="V")
    d = te.reduce_axis((0, D), name="d")
    L = te.compute((S, S), lambda i, j: te.if_then_else(
        j <= i, te.sum(Q[i, d] * K[j, d], axis=d) * 0.7, -1e9), name="L")
    m = te.reduce_axis((0, S), name="m")
    Ex = te.compute((S, S), lambda i, j: te.exp(L[i, j] - te.max(L[i, m], axis=m)), name="Ex")
    k = te.reduce_axis((0, S), name="k")
    Pr = te.compute((S, S), lambda i, j: Ex[i, j] / te.sum(Ex[i, k], axis=k), name="Pr")
    t = te.reduce_axis((0, S), name="t")
    O = te.compute((S, D), lambda i, e: te.sum(Pr[i, t] * V[t, e], axis=t), name="O")
    check(O, [Q, K, V])


def test_gather_by_affine_index_and_slice():
    A = te.placeholder((4, 6), F, name="A")
    C = te.compute((3, 2), lambda i, j: A[3 - i, 2 * j + 1] * A[i, 0], name="C")
    check(C, [A])


# the gather form: each store of a gradient kernel at a point of its own loops --------------------
# (tests/gather_form.py walks the lowered IR with einloop's visitor; see its docstring)

def _conv2d_stride2_pad1_dilation2():
    A = te.placeholder((1, 2, 7, 7), F, name="A")
    W = te.placeholder((3, 2, 3, 3), F, name="W")
    pad = te.compute((1, 2, 9, 9), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < 8, w >= 1, w < 8), A[n, c, h - 1, w - 1], 0.0), name="pad")
    c = te.reduce_axis((0, 2), name="c")
    rh = te.reduce_axis((0, 3), name="rh")
    rw = te.reduce_axis((0, 3), name="rw")
    out = te.compute((1, 3, 3, 3), lambda n, o, h, w: te.sum(
        pad[n, c, 2 * h + 2 * rh, 2 * w + 2 * rw] * W[o, c, rh, rw], axis=[c, rh, rw]),
        name="conv")
    return out, [A, W]


def _depthwise():
    A = te.placeholder((1, 3, 6, 6), F, name="A")
    W = te.placeholder((3, 3, 3), F, name="W")
    rh = te.reduce_axis((0, 3), name="rh")
    rw = te.reduce_axis((0, 3), name="rw")
    out = te.compute((1, 3, 4, 4), lambda n, c, h, w: te.sum(
        A[n, c, h + rh, w + rw] * W[c, rh, rw], axis=[rh, rw]), name="dw")
    return out, [A, W]


def _max_pool():
    A = te.placeholder((1, 2, 4, 6), F, name="A")
    rh = te.reduce_axis((0, 2), name="rh")
    rw = te.reduce_axis((0, 2), name="rw")
    out = te.compute((1, 2, 2, 3), lambda n, c, h, w: te.max(
        A[n, c, 2 * h + rh, 2 * w + rw], axis=[rh, rw]), name="pool")
    return out, [A]


def _avg_pool_3x3_pad1():
    A = te.placeholder((1, 2, 4, 5), F, name="A")
    rh = te.reduce_axis((0, 3), name="rh")
    rw = te.reduce_axis((0, 3), name="rw")
    out = te.compute((1, 2, 4, 5), lambda n, c, h, w: te.sum(
        A[n, c, h + rh - 1, w + rw - 1] / 9.0, axis=[rh, rw],
        where=te.all(h + rh >= 1, h + rh < 5, w + rw >= 1, w + rw < 6)), name="avg")
    return out, [A]


def _attention():
    S, D = 6, 4
    Q, K, V = (te.placeholder((S, D), F, name=n) for n in "QKV")
    rd = te.reduce_axis((0, D), name="rd")
    sc = te.compute((S, S), lambda i, j: te.sum(Q[i, rd] * K[j, rd], axis=rd), name="sc")
    rj = te.reduce_axis((0, S), name="rj")
    mx = te.compute((S,), lambda i: te.max(sc[i, rj], axis=rj), name="mx")
    e = te.compute((S, S), lambda i, j: te.exp(sc[i, j] - mx[i]), name="e")
    rj2 = te.reduce_axis((0, S), name="rj2")
    den = te.compute((S,), lambda i: te.sum(e[i, rj2], axis=rj2), name="den")
    rj3 = te.reduce_axis((0, S), name="rj3")
    out = te.compute((S, D), lambda i, c: te.sum(e[i, rj3] * V[rj3, c], axis=rj3) / den[i],
                     name="out")
    return out, [Q, K, V]


def _matmul():
    A, B, C = matmul()
    return C, [A, B]


GATHER_CASES = {"conv2d": _conv2d_stride2_pad1_dilation2, "depthwise_conv": _depthwise,
                "max_pool": _max_pool, "avg_pool": _avg_pool_3x3_pad1, "attention": _attention,
                "matmul": _matmul}


def _lowered(tensors, outputs, auto):
    """The kernel of *tensors* (inputs, then *outputs*) lowered with the default schedule, or
    with the auto-scheduler's untuned one (the schedule einloop.torch builds a gradient kernel
    with)."""
    if not auto:
        return lower(create_schedule(outputs), tensors)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.UntunedScheduleWarning)
        s, args = autotune.auto_schedule(tensors)
    return lower(s, args)


@pytest.mark.parametrize("auto", [False, True], ids=["default", "auto-scheduler"])
@pytest.mark.parametrize("case", list(GATHER_CASES))
def test_gradient_kernels_are_in_gather_form(case, auto):
    """The kernel computing every input's gradient from a head (as einloop.torch builds it):
    no store that two points of its loops make to one element, no parallel loop that does not
    move a store, no data-dependent store, no atomic; each gradient written over its shape."""
    out, inputs = GATHER_CASES[case]()
    head = te.placeholder(out.shape, F, name="head")
    grads = te.gradient(out, inputs, head)
    read = {id(op) for op in ComputeDAG(grads).ops}
    tensors = [t for t in [*inputs, head] if id(t.op) in read] + grads
    func = _lowered(tensors, grads, auto)
    assert gather_form.problems(func) == []
    written = {s.buffer.name for s in walk_stmt(func.body) if isinstance(s, Store)}
    assert {g.name for g in grads} <= written


def test_window_gradients_sum_over_the_taps_and_default_head_is_no_buffer():
    """The conv window is solved for the output point: dA sums over the taps (and the output
    channels), not over every output; the default head is the constant 1, not a buffer."""
    out, (A, W) = _conv2d_stride2_pad1_dilation2()
    gA, gW = te.gradient(out, [A, W])
    # the padding's adjoint (a crop of the padded input's) is folded into gA: one reduction
    # over A's own shape, no stage over the padded one
    assert not any(op.name == "pad.grad.conv" for op in ComputeDAG([gA]).ops)
    assert sorted(iv.extent for iv in gA.op.reduce_axis) == [3, 3, 3]    # o, rh, rw
    for g, reads in ((gA, W), (gW, A)):
        func = lower(create_schedule([g]), [reads, g])
        assert gather_form.problems(func) == []
        assert not any(b.name == "head" for b in func.args)
    A, B, C = matmul()
    (gA,) = te.gradient(C, [A])
    assert lower(create_schedule([gA]), [B, gA]).temps == ()


def test_the_gather_form_check_finds_scatters_races_and_data_dependent_stores():
    """The check above can fail: hand-written kernels that scatter, race, or store through an
    index read from memory, next to a correct one."""
    from einloop.ir import expr as E, stmt as S
    dX, H = E.Buffer("dX", F, (5,), E.Scope.ARG), E.Buffer("H", F, (3,), E.Scope.ARG)
    idx = E.Buffer("idx", "int64", (3,), E.Scope.ARG)
    i, r = E.Var("i"), E.Var("r")

    def check_of(body):
        return gather_form.problems(S.LoweredFunc("f", (H, idx, dX), (), body))
    scatter = S.For(i, 3, S.ForKind.PARALLEL, S.For(r, 3, S.ForKind.SERIAL, S.Store(
        dX, i + r, E.Load(dX, i + r, F) + E.Load(H, i, F))))           # dX[i + r] += H[i]
    assert any("write one element (a scatter)" in p for p in check_of(scatter))
    race = S.For(i, 3, S.ForKind.PARALLEL, S.For(r, 5, S.ForKind.SERIAL,
                                                   S.Store(dX, r, E.Load(H, i, F))))
    assert any("parallel loop i does not move the index" in p for p in check_of(race))
    by_data = S.For(i, 3, S.ForKind.SERIAL, S.Store(dX, E.Load(idx, i, "int64"),
                                                     E.Load(H, i, F)))
    assert any("reads memory" in p for p in check_of(by_data))
    partial = S.For(i, 3, S.ForKind.PARALLEL, S.Store(dX, i, E.Load(H, i, F)))
    assert check_of(partial) == ["dX: its stores write 3 of its 5 elements"]
    atomic = S.For(i, 5, S.ForKind.PARALLEL, S.Store(dX, i, E.Call("atomic_add", (E.Load(
        dX, i, F),), F)))
    assert check_of(atomic) == ["a call of atomic_add, not a pure math function"]
    gather = S.For(i, 5, S.ForKind.PARALLEL, S.Store(dX, i, E.Call("exp", (E.Load(
        dX, i, F),), F)))
    assert check_of(gather) == []


# what cannot be differentiated -------------------------------------------------------------------

def test_integer_output_and_input_are_refused():
    A = te.placeholder((4,), "int32", name="A")
    C = te.compute((4,), lambda i: A[i] * 2, name="C")
    with pytest.raises(TEError, match="output C has dtype int32"):
        te.gradient(C, [A])
    D = te.compute((4,), lambda i: A[i].astype(F), name="D")
    with pytest.raises(TEError, match="input A has dtype int32"):
        te.gradient(D, [A])


def test_data_dependent_index_is_refused_naming_the_stage():
    A = te.placeholder((5,), F, name="A")
    idx = te.placeholder((3,), "int64", name="idx")
    C = te.compute((3,), lambda i: A[idx[i]], name="gathered")
    with pytest.raises(TEError, match="stage gathered reads A at the data-dependent index"):
        te.gradient(C, [A])


def test_non_affine_index_is_refused_naming_the_stage():
    A = te.placeholder((5,), F, name="A")
    C = te.compute((10,), lambda i: A[i % 5] * A[i // 2], name="wrap")
    with pytest.raises(TEError, match="stage wrap reads A at .* not affine"):
        te.gradient(C, [A])


def test_nearest_upsampling_by_floor_division():
    A = te.placeholder((3, 4), F, name="A")
    C = te.compute((6, 11), lambda i, j: A[i // 2, (j + 1) // 3] * A[i // 2, (j + 1) // 3],
                   name="upsample")
    check(C, [A])


def test_custom_reducer_and_bad_head_are_refused():
    A = te.placeholder((2, 3), F, name="A")
    k = te.reduce_axis((0, 3), name="k")
    logsum = te.comm_reducer(lambda x, y: te.log(te.exp(x) + te.exp(y)), lambda dt: -1e30,
                             name="logsumexp")
    P = te.compute((2,), lambda i: logsum(A[i, k], axis=k), name="P")
    with pytest.raises(TEError, match="stage P reduces with logsumexp"):
        te.gradient(P, [A])
    S = te.compute((2,), lambda i: te.sum(A[i, k], axis=k), name="S")
    with pytest.raises(TEError, match="head must be a tensor of the output's shape"):
        te.gradient(S, [A], head=te.placeholder((3,), F, name="h"))


def test_symbolic_batch_size():
    """One gradient kernel serves every batch size (what einloop.torch's dynamic=True needs)."""
    n, d = te.size_var("n"), 5
    x = te.placeholder((n, d), F, name="x")
    w = te.placeholder((d,), F, name="w")
    k = te.reduce_axis((0, d), name="k")
    ss = te.compute((n,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="ss")
    y = te.compute((n, d), lambda i, j: x[i, j] / te.sqrt(ss[i] / d + 1e-6) * w[j], name="y")
    h = te.placeholder((n, d), F, name="h")
    gx, gw = te.gradient(y, [x, w], h)
    f = build(create_schedule([gx, gw]), [x, w, h, gx, gw])
    rng = np.random.default_rng(1)
    for rows in (1, 4):
        a, b = rng.uniform(-1, 1, (rows, d)), rng.uniform(-1, 1, d)
        hh = rng.uniform(-1, 1, (rows, d))
        o1, o2 = np.zeros((rows, d)), np.zeros(d)
        f(a, b, hh, o1, o2)
        r = np.sqrt((a * a).sum(1, keepdims=True) / d + 1e-6)
        np.testing.assert_allclose(o2, (hh * a / r).sum(0), rtol=1e-12)
        gy = hh * b                       # d(x / r) with r = sqrt(mean(x^2) + eps)
        want = gy / r - a * (gy * a).sum(1, keepdims=True) / (d * r ** 3)
        np.testing.assert_allclose(o1, want, rtol=1e-10)


def test_symbolic_shifted_read_through_the_declarations_clamp():
    """A read of a symbolic shape is clamped by the declaration; the gradient solves the
    unclamped index (the clamp only protects the untaken branch)."""
    n = te.size_var("n")
    A = te.placeholder((n,), F, name="A")
    P = te.compute((n,), lambda i: te.if_then_else(i >= 1, A[i - 1], 0.0) * A[i], name="P")
    assert "min(" in str(P.op.body)
    (g,) = te.gradient(P, [A])
    f = build(create_schedule([g]), [A, g])
    for size in (1, 2, 6):
        a = np.arange(1.0, size + 1)
        out = np.full(size, np.nan)
        f(a, out)
        want = np.concatenate([[0.0], a[:-1]]) + np.concatenate([a[1:], [0.0]])
        np.testing.assert_allclose(out, want)


def test_conv2d_padding_stride_dilation_and_depthwise():
    N, C, H, O = 1, 2, 5, 2
    A = te.placeholder((N, C, H, H), F, name="A")
    W = te.placeholder((O, C, 2, 2), F, name="W")
    pad = te.compute((N, C, H + 2, H + 2), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < H + 1, w >= 1, w < H + 1), A[n, c, h - 1, w - 1], 0.0), name="pad")
    c = te.reduce_axis((0, C), name="c")
    rh = te.reduce_axis((0, 2), name="rh")
    rw = te.reduce_axis((0, 2), name="rw")
    out = te.compute((N, O, 3, 3), lambda n, o, h, w: te.sum(
        pad[n, c, 2 * h + 2 * rh, 2 * w + 2 * rw] * W[o, c, rh, rw], axis=[c, rh, rw]),
        name="conv")
    check(out, [A, W])
    D = te.placeholder((C, 3, 3), F, name="D")
    kh = te.reduce_axis((0, 3), name="kh")
    kw = te.reduce_axis((0, 3), name="kw")
    dw = te.compute((N, C, H, H), lambda n, ch, h, w: te.sum(
        pad[n, ch, h + kh, w + kw] * D[ch, kh, kw], axis=[kh, kw]), name="depthwise")
    check(dw, [A, D])


def test_conv_data_gradient_reads_a_zero_extended_adjoint_not_one_guard_per_product():
    """The data gradient of a convolution sums over the window with no condition: the
    adjoint is read zero-extended beyond the output's border (a stage of its own)."""
    A, W, out = conv2d(2, 3, 6, 3, name="conv")
    assert tuple(out.shape) == (1, 3, 4, 4)
    check(out, [A, W])
    head = te.placeholder(out.shape, F, name="head")
    ga, gw = te.gradient(out, [A, W], head)
    assert ga.op.body.condition is None
    ext = [t for t in ga.op.input_tensors if t.name == "conv.grad.extended"]
    assert len(ext) == 1 and tuple(ext[0].shape) == (1, 3, 8, 8)
    assert gw.op.body.condition is None     # the weight gradient never needed a guard


def test_several_outputs_sum_their_adjoints():
    """Two outputs, one read by the other: d/dA of sum(hS * S) + sum(hT * T)."""
    A = te.placeholder((3, 4), F, name="A")
    k = te.reduce_axis((0, 4), name="k")
    S = te.compute((3,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="S")
    T = te.compute((3, 4), lambda i, j: A[i, j] * S[i], name="T")
    hS = te.placeholder((3,), F, name="hS")
    hT = te.placeholder((3, 4), F, name="hT")
    (g,) = te.gradient([S, T], [A], [hS, hT])
    rng = np.random.default_rng(3)
    a, hs, ht = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (3, 4))
    out = np.zeros((3, 4))
    build(create_schedule([g]), [A, hS, hT, g])(a, hs, ht, out)
    s = (a * a).sum(1, keepdims=True)
    want = 2 * a * hs[:, None] + ht * s + 2 * a * (ht * a).sum(1, keepdims=True)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    (ones,) = te.gradient([S, T], [A])
    out1 = np.zeros((3, 4))
    build(create_schedule([ones]), [A, ones])(a, out1)
    np.testing.assert_allclose(out1, 2 * a + s + 2 * a * a.sum(1, keepdims=True), rtol=1e-12)
    with pytest.raises(TEError, match="1 head.* for 2 output"):
        te.gradient([S, T], [A], hS)


def test_gradient_dag_tunes_in_build_workers(tmp_path):
    """The gradient DAG is pickled to the build workers and measured like any operator."""
    A, B, C = matmul(8, 6, 4)
    H = te.placeholder(C.shape, F, name="H")
    gA, gB = te.gradient(C, [A, B], H)
    s, args = autotune.auto_schedule([A, B, H, gA, gB], n_trial=2, log=str(tmp_path / "g.jsonl"),
                                     quiet=True, seed=0)
    assert [t.name for t in args] == ["A", "B", "H", gA.name, gB.name]
    rng = np.random.default_rng(0)
    a, b, h = (rng.uniform(-1, 1, t.shape) for t in (A, B, H))
    o1, o2 = np.zeros(A.shape), np.zeros(B.shape)
    build(s, args)(a, b, h, o1, o2)
    np.testing.assert_allclose(o1, h @ b.T, rtol=1e-12)
    np.testing.assert_allclose(o2, a.T @ h, rtol=1e-12)
    assert (tmp_path / "g.jsonl").read_text().strip()


def _crop_of_sum(index):
    """R[p, q] = sum_k A[p, k] * B[k, q] over 7 x 9; C = R read at *index*(i, j) over 5 x 6."""
    A, B = te.placeholder((7, 4), name="A"), te.placeholder((4, 9), name="B")
    k = te.reduce_axis((0, 4), name="k")
    R = te.compute((7, 9), lambda p, q: te.sum(A[p, k] * B[k, q], axis=k), name="R")
    C = te.compute((5, 6), lambda i, j: R[index(i, j)] * 2.0, name="C")
    return A, B, R, C


def test_a_crop_of_a_sum_is_folded_into_one_reduction_over_its_own_domain():
    from einloop.te.gradient import _fold_crops
    rng = np.random.default_rng(4)
    a, b = rng.random((7, 4), "float32"), rng.random((4, 9), "float32")
    A, B, R, C = _crop_of_sum(lambda i, j: (i + 1, j + 2))
    (F,) = _fold_crops([C])
    assert [iv.extent for iv in F.op.reduce_axis] == [4] and R.op not in ComputeDAG([F]).ops
    f = build(create_schedule(F), [A, B, F])
    out = np.zeros((5, 6), "float32")
    f(a, b, out)
    np.testing.assert_allclose(out, 2 * (a @ b)[1:6, 2:8], rtol=1e-5)
    # not folded: an axis read twice (R[i, i]: points of R computed once per j), an axis the
    # read ignores, and a sum that another gradient reads too
    for index in (lambda i, j: (i, i), lambda i, j: (i + 1, 3)):
        _, _, _, C2 = _crop_of_sum(index)
        assert _fold_crops([C2])[0] is C2
    A, B, R, C = _crop_of_sum(lambda i, j: (i, j))
    D = te.compute((7, 9), lambda p, q: R[p, q] + 1.0, name="D")
    assert _fold_crops([C, D])[0] is C
