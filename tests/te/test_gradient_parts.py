"""te.gradient through sum scatters and multi-output stages (einloop.te.gradient_parts).

Each gradient is built with einloop (the default schedule, and for some a hand schedule of the
gradient's stages: split, vectorized, parallel) and compared with central finite differences of
``sum(head * output)`` computed from the forward kernel, in float64, on small odd sizes; the
scatters' indices repeat and leave the output (clamped), and some are checked against the
closed form (the output's adjoint gathered at the index) too.  Misuses are in
tests/errors/test_gradient_errors.py.
"""
import numpy as np
import pytest

from einloop import te, build, create_schedule
from einloop.te.tensor import ComputeOp

from test_gradient import _kernel

F = "float64"
RNG = np.random.default_rng(11)


def _numeric(outs, x, heads, values, eps=1e-6):
    """d sum_k(head_k * out_k) / dx by central differences."""
    fwd = _kernel(outs)
    g = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape):
        total = []
        for sign in (1, -1):
            vals = dict(values)
            vals[x] = values[x].copy()
            vals[x][idx] += sign * eps
            total.append(sum(np.sum(values[h] * o) for h, o in zip(heads, fwd(vals))))
        g[idx] = (total[0] - total[1]) / (2 * eps)
    return g


def check(outs, inputs, values, schedule=None, rtol=1e-6):
    """te.gradient of *outs* (heads random) against finite differences; returns the grads."""
    outs = outs if isinstance(outs, list) else [outs]
    heads = [te.placeholder(o.shape, F, name=f"head{k}") for k, o in enumerate(outs)]
    values = dict(values)
    for h in heads:
        values[h] = RNG.uniform(-1, 1, h.shape)
    grads = te.gradient(outs, inputs, heads)
    got = _kernel(grads, schedule)(values)
    for x, g in zip(inputs, got):
        want = _numeric(outs, x, heads, values)
        np.testing.assert_allclose(g, want, rtol=rtol, atol=rtol, err_msg=f"d/d{x.name}")
    return got, values, heads


def hand_schedule(s):
    """Every elementwise stage's last axis split by 3 (inner vectorized), its first parallel."""
    for st in s.stages:
        if not isinstance(st.op, ComputeOp) or st.op.reduce_axis:
            continue
        axes = list(st.op.axis)
        if not axes:
            continue
        _, inner = st.split(axes[-1], factor=3)
        st.vectorize(inner)
        st.parallel(st.leaf_iter_vars[0])


def floats(shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(F)


# scatters -------------------------------------------------------------------------------------

def test_scatter_add_updates_get_the_output_adjoint_gathered_at_the_index():
    ids = te.placeholder((11,), "int32", name="ids")
    U = te.placeholder((5, 11), F, name="U")
    H = te.scatter_add((5, 7), ids, U, axis=1, name="H")
    idx = np.array([0, 3, 3, 6, -2, 9, 1, 3, 0, 7, 5], "int32")      # repeats, out of range
    for schedule in (None, hand_schedule):
        (dU,), values, (head,) = check(H, [U], {ids: idx, U: floats((5, 11))}, schedule)
        np.testing.assert_allclose(dU, values[head][:, np.clip(idx, 0, 6)], rtol=1e-12)


def test_base_plus_scatter_base_gets_the_identity_producer_gets_the_chain_rule():
    ids = te.placeholder((9,), "int32", name="ids")
    A = te.placeholder((9, 3), F, name="A")
    B = te.placeholder((4, 3), F, name="B")
    U = te.compute((9, 3), lambda j, c: te.exp(A[j, c]) * A[j, c], name="U")
    H = te.scatter_add((4, 3), ids, U, name="H")
    Y = te.compute((4, 3), lambda i, c: B[i, c] + H[i, c] * H[i, c], name="Y")
    idx = np.array([1, 1, 0, 3, 5, -1, 2, 1, 3], "int32")
    (dA, dB), values, (head,) = check(Y, [A, B], {ids: idx, A: floats((9, 3)),
                                                   B: floats((4, 3))})
    np.testing.assert_array_equal(dB, values[head])


def test_embedding_backward_and_padding_positions_get_no_gradient():
    ids = te.placeholder((3, 5), "int32", name="ids")
    G = te.placeholder((3, 5, 4), F, name="G")
    E = te.embedding_backward(ids, G, 6, padding_idx=2, name="E")
    idx = RNG.integers(0, 6, (3, 5)).astype("int32")
    idx[0, :2] = 2
    (dG,), values, (head,) = check(E, [G], {ids: idx, G: floats((3, 5, 4))}, hand_schedule)
    want = values[head][idx] * (idx != 2)[..., None]
    np.testing.assert_allclose(dG, want, rtol=1e-12)


def test_histogram_weights_and_a_general_sum_scatter_under_where():
    X = te.placeholder((13,), "int32", name="X")
    W = te.placeholder((13,), F, name="W")
    H = te.histogram(X, 5, weights=W, name="H")
    x = RNG.integers(-1, 7, 13).astype("int32")
    check(H, [W], {X: x, W: floats(13)})
    j = te.reduce_axis((0, 13), name="j")
    S = te.scatter_reduce((5,), lambda: ((X[j],), W[j] * W[j]), axis=j,
                          where=te.all(X[j] >= 0, X[j] < 5), name="S")
    (dW,), values, (head,) = check(S, [W], {X: x, W: floats(13)})
    keep = (x >= 0) & (x < 5)
    np.testing.assert_allclose(dW, np.where(keep, 2 * values[W] * values[head][np.clip(x, 0, 4)],
                                            0), rtol=1e-12)


def test_scatter_of_a_symbolic_number_of_updates():
    n = te.size_var("n")
    ids = te.placeholder((n,), "int32", name="ids")
    U = te.placeholder((n, 3), F, name="U")
    H = te.scatter_add((4, 3), ids, U, name="H")
    head = te.placeholder((4, 3), F, name="head")
    dU = te.gradient(H, U, head)
    f = build(create_schedule(dU), [ids, head, dU])
    for rows in (1, 6, 13):
        idx, h = RNG.integers(-1, 6, rows).astype("int32"), floats((4, 3))
        got = np.zeros((rows, 3))
        f(idx, h, got)
        np.testing.assert_array_equal(got, h[np.clip(idx, 0, 3)])


# multi-output stages ------------------------------------------------------------------------------

def test_each_output_of_an_elementwise_multi_output_stage_sends_its_adjoint_back():
    A = te.placeholder((5, 7), F, name="A")
    B = te.placeholder((5, 7), F, name="B")
    P, Q, K = te.compute((5, 7), lambda i, j: (A[i, j] * B[i, j], te.tanh(A[i, j]) + B[i, j],
                                               (A[i, j] * 4.0).astype("int32")), name="PQ")
    Y = te.compute((5, 7), lambda i, j: P[i, j] * Q[i, j] + K[i, j].astype(F), name="Y")
    check(Y, [A, B], {A: floats((5, 7)), B: floats((5, 7))}, hand_schedule)
    check([P, Q], [A, B], {A: floats((5, 7)), B: floats((5, 7))})      # both as outputs


def test_sum_and_max_of_one_row_in_one_stage():
    X = te.placeholder((3, 9), F, name="X")
    k = te.reduce_axis((0, 9), name="k")
    S, M = te.compute((3,), lambda i: (te.sum(X[i, k] * X[i, k], axis=k),
                                       te.max(X[i, k], axis=k)), name="SM")
    check([S, M], [X], {X: floats((3, 9))})


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_argmax_value_sends_the_adjoint_to_the_first_extremum(fn):
    X = te.placeholder((5, 11), F, name="X")
    idx, val = getattr(te, fn)(X, axis=1)
    Y = te.compute((5,), lambda i: val[i] * val[i] + idx[i].astype(F), name="Y")
    check(Y, [X], {X: floats((5, 11))})
    x = floats((5, 11))
    x[1, 3] = x[1, 7] = x[1].max() + 1 if fn == "argmax" else x[1].min() - 1     # a tie
    head = te.placeholder((5,), F, name="head")
    h = floats(5)
    got = _kernel([te.gradient(val, X, head)])({head: h, X: x})[0]
    pick = getattr(np, fn)(x, axis=1)
    assert pick[1] == 3
    want = np.zeros((5, 11))
    want[np.arange(5), pick] = h
    np.testing.assert_array_equal(got, want)


def test_welford_mean_and_variance():
    X = te.placeholder((3, 11), F, name="X")
    mean, var = te.welford(X, axis=1, name="W")
    x = floats((3, 11)) + 5.0                       # a mean far from 0
    (dX,), values, (hm, hv) = check([mean, var], [X], {X: x})
    want = (values[hm][:, None] + values[hv][:, None] * 2 * (x - x.mean(1, keepdims=True))) / 11
    np.testing.assert_allclose(dX, want, rtol=1e-9)
    Y = te.compute((3,), lambda i: te.sqrt(var[i]) * mean[i], name="Y")     # through a stage
    check(Y, [X], {X: x}, hand_schedule)
