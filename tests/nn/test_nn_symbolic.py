"""einloop.nn with symbolic extents (te.size_var): the operators the torch backend's symbolic
path declares (broadcast arithmetic, matmul, softmax, layer norm, a mean over a symbolic axis,
broadcast_to, squeeze, concatenate) built once and run at several sizes against NumPy, under the
default schedule and a hand schedule; and the shapes that do not fit, refused."""
import numpy as np
import pytest

from einloop import TEError, build, create_schedule, nn, te

SIZES = (1, 7, 37, 101)


def _declare():
    """``softmax(x @ w + b)``, ``layer_norm(x)``, ``mean(x, axis 0)``, ``x`` broadcast over a
    new leading axis of size 2 and squeezed back, ``cat([x, x], -1)``; x of (n, 5)."""
    n = te.size_var("n")
    x = te.placeholder((n, 5), name="x")
    w = te.placeholder((5, 3), name="w")
    b = te.placeholder((3,), name="b")
    sm = nn.softmax(nn.add(nn.matmul(x, w), b), -1, name="sm")
    ln = nn.layer_norm(x, 1, name="ln")
    mean = nn.mean(x, [0], keepdims=True, name="mean")
    wide = nn.broadcast_to(nn.reshape(w, (1, 5, 3)), (2, 5, 3), name="wide")
    back = nn.squeeze(nn.slice_axis(wide, 0, 0, 1), 0, name="back")
    cat = nn.concatenate([x, nn.multiply(x, 2.0)], -1, name="cat")
    return [x, w, b], [sm, ln, mean, back, cat]


def _reference(x, w, b):
    y = x @ w + b
    e = np.exp(y - y.max(1, keepdims=True))
    ln = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    return [e / e.sum(1, keepdims=True), ln, x.mean(0, keepdims=True), w,
            np.concatenate([x, 2 * x], -1)]


def _hand(s, outs):
    """Each output's first axis split by 4 (the outer part parallel), its last split by 4
    (vectorized) where it has two."""
    for t in outs:
        st = s[t]
        if len(t.op.axis) == 2:
            o, _ = st.split(t.op.axis[0], factor=4)
            _, vi = st.split(t.op.axis[1], factor=4)
            st.parallel(o)
            st.vectorize(vi)
    return s


@pytest.mark.parametrize("schedule", ["default", "hand"])
def test_one_kernel_matches_numpy_at_every_size(schedule):
    ins, outs = _declare()
    s = create_schedule(outs)
    if schedule == "hand":
        _hand(s, outs)
    f = build(s, ins + outs)
    rng = np.random.default_rng(0)
    for n in SIZES:
        x = rng.standard_normal((n, 5)).astype("float32")
        w = rng.standard_normal((5, 3)).astype("float32")
        b = rng.standard_normal(3).astype("float32")
        got = [np.full(shape, np.nan, "float32")
               for shape in ((n, 3), (n, 5), (1, 5), (5, 3), (n, 10))]
        f(x, w, b, *got)
        for g, want in zip(got, _reference(x, w, b)):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5, err_msg=f"n={n}")


def test_two_symbolic_extents_broadcast_and_contract():
    """(m, k) @ (k, n) with k symbolic (the contraction of softmax(QK^T) @ V), plus a row
    vector broadcast along m."""
    m, k = te.size_var("m"), te.size_var("k")
    a = te.placeholder((m, k), name="a")
    v = te.placeholder((k, 4), name="v")
    r = te.placeholder((1, 4), name="r")
    out = nn.add(nn.matmul(a, v), r)
    f = build(create_schedule(out), [a, v, r, out])
    rng = np.random.default_rng(1)
    for mm, kk in ((1, 1), (7, 37), (37, 7)):
        av = rng.standard_normal((mm, kk)).astype("float32")
        vv = rng.standard_normal((kk, 4)).astype("float32")
        rv = rng.standard_normal((1, 4)).astype("float32")
        got = np.full((mm, 4), np.nan, "float32")
        f(av, vv, rv, got)
        np.testing.assert_allclose(got, av @ vv + rv, rtol=1e-4, atol=1e-5)


def test_symbolic_extents_that_do_not_fit_are_refused():
    n, m = te.size_var("n"), te.size_var("m")
    a = te.placeholder((n, 4), name="a")
    b = te.placeholder((m, 4), name="b")
    with pytest.raises(TEError, match="do not broadcast"):
        nn.add(a, b)                    # n and m are not known equal
    with pytest.raises(TEError, match="inner dimensions differ"):
        nn.matmul(te.placeholder((4, n), name="c"), b)
    with pytest.raises(TEError, match="do not broadcast"):
        nn.broadcast_to(a, (m, 4))
