"""Row softmax, float32: the declaration and a hand schedule for a memory-bound operator.

The reductions (row max, row sum) are declared in two steps: ``lanes`` partial results per row
(a data axis, so it can be vectorized), then a short reduction over the lanes.  The schedule
computes every stage of a row at that row's loop, so the row stays in cache, keeps ``exp``
vectorized, and runs rows on all cores: the input is read once and the output written once.

Run it:  python examples/softmax.py
"""
import numpy as np

from einloop import te, create_schedule, build


def declare(M, N, lanes=16, dtype="float32"):
    """Out[i, j] = exp(X[i, j] - max_j X[i, :]) / sum_j exp(X[i, j] - max_j X[i, :]).

    The reductions are split into ``lanes`` partial results (a vectorizable data axis) and a
    short final reduction; the division is one reciprocal per row and a multiply per element.
    """
    X = te.placeholder((M, N), dtype, name="X")
    lanes = lanes if N % lanes == 0 else 1
    ko = te.reduce_axis((0, N // lanes), name="ko")
    MaxP = te.compute((M, lanes), lambda i, l: te.max(X[i, ko * lanes + l], axis=ko), name="MaxP")
    lm = te.reduce_axis((0, lanes), name="lm")
    Max = te.compute((M,), lambda i: te.max(MaxP[i, lm], axis=lm), name="Max")
    E = te.compute((M, N), lambda i, j: te.exp(X[i, j] - Max[i]), name="E")
    ks = te.reduce_axis((0, N // lanes), name="ks")
    SumP = te.compute((M, lanes), lambda i, l: te.sum(E[i, ks * lanes + l], axis=ks), name="SumP")
    ls = te.reduce_axis((0, lanes), name="ls")
    Sum = te.compute((M,), lambda i: te.sum(SumP[i, ls], axis=ls), name="Sum")
    # one division per row, then a multiply per element: vector division is slow
    Inv = te.compute((M,), lambda i: 1.0 / Sum[i], name="Inv")
    Out = te.compute((M, N), lambda i, j: E[i, j] * Inv[i], name="Out")
    return X, MaxP, Max, E, SumP, Sum, Inv, Out


def schedule(M, N, lanes=16):
    """Every stage computed per row inside the parallel row loop; vector loops inside."""
    X, MaxP, Max, E, SumP, Sum, Inv, Out = declare(M, N, lanes)
    s = create_schedule(Out)
    i, j = s[Out].op.axis
    s[Out].parallel(i)
    jo, ji = s[Out].split(j, factor=16)
    s[Out].vectorize(ji)
    for stage in (MaxP, Max, E, SumP, Sum, Inv):
        s[stage].compute_at(s[Out], i)
    for partial in (MaxP, SumP):
        _, l = s[partial].op.axis
        s[partial].reorder(s[partial].op.reduce_axis[0], l)
        s[partial].vectorize(l)
    _, ej = s[E].op.axis
    ejo, eji = s[E].split(ej, factor=16)
    s[E].vectorize(eji)
    return s, [X, Out]


def softmax(M, N):
    """The plain declaration (max, exp, sum, divide) as a function returning its tensors
    [X, Out]: what ``autotune.auto_schedule`` and `einloop tune examples/softmax.py:softmax
    --args 4096 1024` schedule without a template."""
    X = te.placeholder((M, N), name="X")
    k1 = te.reduce_axis((0, N), name="k1")
    Mx = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="Max")
    E = te.compute((M, N), lambda i, j: te.exp(X[i, j] - Mx[i]), name="E")
    k2 = te.reduce_axis((0, N), name="k2")
    S = te.compute((M,), lambda i: te.sum(E[i, k2], axis=k2), name="Sum")
    Out = te.compute((M, N), lambda i, j: E[i, j] / S[i], name="Out")
    return [X, Out]


def default(M, N):
    """The plain declaration (max, exp, sum, divide) under the default schedule."""
    X, Out = softmax(M, N)
    return create_schedule(Out), [X, Out]


def reference(x):
    """NumPy's plain softmax: max, exp, sum, divide."""
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=1, keepdims=True)


if __name__ == "__main__":
    M, N = 4096, 1024
    s, args = schedule(M, N)
    f = build(s, args)
    x = np.random.randn(M, N).astype("float32")
    out = np.empty_like(x)
    f(x, out)
    np.testing.assert_allclose(out, reference(x), rtol=1e-5, atol=1e-7)
    t = f.time(x, out, number=10, repeat=5)
    print(f"softmax {M}x{N}: {2 * x.nbytes / t.median / 1e9:.1f} GB/s")
