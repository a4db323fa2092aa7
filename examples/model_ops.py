"""Operators taken from current models, declared as plain Einstein-notation functions, each with a
NumPy reference: the SwiGLU MLP's up projection (two matmuls over one input feeding one
consumer), causal multi-head attention, a transposed convolution in its gather form, a full
reduction and a GEMV.  ``benchmarks/bench_models_ops.py`` auto-schedules them against NumPy and
PyTorch.

Run it:  python examples/model_ops.py      (auto-schedules SwiGLU for a few trials and checks it)
"""
import math

import numpy as np

from einloop import te


def swiglu(n, k, m, dtype="float32"):
    """H = silu(X @ W1) * (X @ W3), X n x k, W1 and W3 k x m; *n* may be a ``te.size_var``."""
    X = te.placeholder((n, k), dtype, name="X")
    W1 = te.placeholder((k, m), dtype, name="W1")
    W3 = te.placeholder((k, m), dtype, name="W3")
    r1 = te.reduce_axis((0, k), name="r1")
    r3 = te.reduce_axis((0, k), name="r3")
    G = te.compute((n, m), lambda i, j: te.sum(X[i, r1] * W1[r1, j], axis=r1), name="G")
    U = te.compute((n, m), lambda i, j: te.sum(X[i, r3] * W3[r3, j], axis=r3), name="U")
    H = te.compute((n, m), lambda i, j: G[i, j] * te.sigmoid(G[i, j]) * U[i, j], name="H")
    return [X, W1, W3, H]


def swiglu_reference(x, w1, w3):
    g = x @ w1
    return g / (1 + np.exp(-g)) * (x @ w3)


def causal_attention(heads, s, d, dtype="float32"):
    """softmax(Q K^T / sqrt(d), later keys masked) V per head; Q, K, V are heads x s x d."""
    Q, K, V = (te.placeholder((heads, s, d), dtype, name=n) for n in "QKV")
    return [Q, K, V, causal_attention_of(Q, K, V)]


def causal_attention_of(Q, K, V):
    """The output of causal attention over the (heads, s, d) tensors Q, K, V (placeholders, or
    what ``einloop.torch.custom_op`` passes)."""
    heads, s, d = Q.shape
    scale = 1.0 / math.sqrt(int(d))
    rd = te.reduce_axis((0, d), name="rd")
    S = te.compute((heads, s, s), lambda h, i, j: te.if_then_else(
        j <= i, te.sum(Q[h, i, rd] * K[h, j, rd], axis=rd) * scale, -1e30), name="S")
    rj = te.reduce_axis((0, s), name="rj")
    M = te.compute((heads, s), lambda h, i: te.max(S[h, i, rj], axis=rj), name="M")
    E = te.compute((heads, s, s), lambda h, i, j: te.exp(S[h, i, j] - M[h, i]), name="E")
    rj2 = te.reduce_axis((0, s), name="rj2")
    L = te.compute((heads, s), lambda h, i: te.sum(E[h, i, rj2], axis=rj2), name="L")
    rj3 = te.reduce_axis((0, s), name="rj3")
    return te.compute((heads, s, d), lambda h, i, c: te.sum(E[h, i, rj3] * V[h, rj3, c],
                                                            axis=rj3) / L[h, i], name="O")


def causal_attention_reference(q, k, v):
    s = q.shape[1]
    scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(q.shape[2]))
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, np.float32(-1e30))
    e = np.exp(scores - scores.max(axis=2, keepdims=True))
    return (e / e.sum(axis=2, keepdims=True)) @ v


def conv2d_transpose(n, c, h, w, o, kernel=4, stride=2, pad=1, dtype="float32"):
    """PyTorch's ``conv_transpose2d(A, W, stride, padding)``, A n x c x h x w, W c x o x kh x kw,
    in its gather form: each output pixel sums the ``kernel // stride`` input rows (and columns)
    whose stride-spaced taps land on it, so no multiply-add touches an inserted zero.  The input
    row of output row y is ``(y + pad) // stride - t`` and its tap ``(y + pad) % stride +
    stride * t``: the index maps have a period of *stride* in y (and x).
    """
    if kernel % stride:
        raise ValueError(f"the gather form needs kernel ({kernel}) a multiple of stride "
                         f"({stride})")
    taps = kernel // stride
    oh, ow = (h - 1) * stride - 2 * pad + kernel, (w - 1) * stride - 2 * pad + kernel
    A = te.placeholder((n, c, h, w), dtype, name="A")
    W = te.placeholder((c, o, kernel, kernel), dtype, name="W")
    # taps - 1 rows of zeros above and left, enough below and right for the last output pixel
    lo = taps - 1
    ph = max(h, (oh - 1 + pad) // stride + 1) + lo
    pw = max(w, (ow - 1 + pad) // stride + 1) + lo
    P = te.compute((n, c, ph, pw), lambda b, ci, y, x: te.if_then_else(
        te.all(y >= lo, y < h + lo, x >= lo, x < w + lo), A[b, ci, y - lo, x - lo], 0.0),
        name="P")
    rc = te.reduce_axis((0, c), name="rc")
    ty = te.reduce_axis((0, taps), name="ty")
    tx = te.reduce_axis((0, taps), name="tx")
    Y = te.compute((n, o, oh, ow), lambda b, f, y, x: te.sum(
        P[b, rc, (y + pad) // stride - ty + lo, (x + pad) // stride - tx + lo]
        * W[rc, f, (y + pad) % stride + stride * ty, (x + pad) % stride + stride * tx],
        axis=[rc, ty, tx]), name="Y")
    return [A, W, Y]


def conv2d_transpose_reference(a, w, stride=2, pad=1):
    """Scatter form: every input pixel times every tap, added at its output position."""
    n, c, h, wd = a.shape
    o, k = w.shape[1], w.shape[2]
    full = np.zeros((n, o, (h - 1) * stride + k, (wd - 1) * stride + k), np.float32)
    # one GEMM over the channels, then k*k strided adds
    taps = np.einsum("ncyx,cors->norsyx", a, w, optimize=True)
    for r in range(k):
        for s in range(k):
            full[:, :, r:r + stride * h:stride, s:s + stride * wd:stride] += taps[:, :, r, s]
    oh, ow = (h - 1) * stride - 2 * pad + k, (wd - 1) * stride - 2 * pad + k
    return full[:, :, pad:pad + oh, pad:pad + ow]


def full_sum(*shape, dtype="float32"):
    """The sum of every element of a tensor of *shape*: one reduction over all its axes."""
    X = te.placeholder(shape, dtype, name="X")
    axes = [te.reduce_axis((0, e), name=f"r{i}") for i, e in enumerate(shape)]
    S = te.compute((1,), lambda _: te.sum(X[tuple(axes)], axis=axes), name="S")
    return [X, S]


def full_sum_reference(x):
    return np.array([x.sum(dtype=np.float64)], np.float32)


def gemv(m, k, dtype="float32"):
    """y = A x, A m x k: one row of output per row of A, which is read once."""
    A = te.placeholder((m, k), dtype, name="A")
    x = te.placeholder((k,), dtype, name="x")
    r = te.reduce_axis((0, k), name="r")
    y = te.compute((m,), lambda i: te.sum(A[i, r] * x[r], axis=r), name="y")
    return [A, x, y]


def gemv_reference(a, x):
    return a @ x


if __name__ == "__main__":
    from einloop import autotune, build
    s, args = autotune.auto_schedule(swiglu(64, 256, 512), n_trial=16)
    f = build(s, args)
    rng = np.random.default_rng(0)
    x, w1, w3 = (rng.standard_normal(shape, np.float32) * 0.1
                 for shape in ((64, 256), (256, 512), (256, 512)))
    out = np.empty((64, 512), np.float32)
    f(x, w1, w3, out)
    np.testing.assert_allclose(out, swiglu_reference(x, w1, w3), rtol=1e-3, atol=1e-4)
    print("SwiGLU 64x256 @ 256x512 auto-scheduled: matches NumPy")
