"""The operator zoo of the test suite: each entry declares an operator and its NumPy reference."""
import math

import numpy as np

from einloop import te


def gemm(M=37, N=45, K=29):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B], [C], lambda a, b: [a @ b]


def linear_layer(M=24, K=40, N=70, constant=True, relu=False):
    """y = x @ W.T + b (then ReLU), W [N, K] as PyTorch stores a linear layer's weight, W and b
    declared *constant* (a model's weights); the product is the stage ``mm``."""
    W = te.placeholder((N, K), name="W", constant=constant)
    b = te.placeholder((N,), name="b", constant=constant)
    x = te.placeholder((M, K), name="x")
    k = te.reduce_axis((0, K), name="k")
    mm = te.compute((M, N), lambda i, j: te.sum(x[i, k] * W[j, k], axis=k), name="mm")
    if relu:
        y = te.compute((M, N), lambda i, j: te.max(mm[i, j] + b[j], te.const(0.0, "float32")),
                       name="y")
    else:
        y = te.compute((M, N), lambda i, j: mm[i, j] + b[j], name="y")
    ref = (lambda w, bb, xx: [np.maximum(xx @ w.T + bb, 0)]) if relu else \
        (lambda w, bb, xx: [xx @ w.T + bb])
    return [W, b, x], [y], ref


def batch_matmul(Bt=3, M=17, N=20, K=13):
    A = te.placeholder((Bt, M, K), name="A")
    B = te.placeholder((Bt, K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    return [A, B], [C], lambda a, b: [a @ b]


def matmul_transposed(M=33, N=19, K=24):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((N, K), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return [A, B], [C], lambda a, b: [a @ b.T]


def conv2d(N=1, C=5, H=11, W=13, K=7, R=3, S=3, pad=1, stride=2):
    A = te.placeholder((N, C, H, W), name="A")
    Wt = te.placeholder((K, C, R, S), name="W")
    Pad = te.compute((N, C, H + 2 * pad, W + 2 * pad), lambda n, c, h, w: te.if_then_else(
        te.all(h >= pad, h < H + pad, w >= pad, w < W + pad), A[n, c, h - pad, w - pad], 0.0),
        name="Pad")
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    Out = te.compute((N, K, Ho, Wo), lambda n, k, y, x: te.sum(
        Pad[n, c, y * stride + r, x * stride + s] * Wt[k, c, r, s], axis=[c, r, s]), name="Out")

    def ref(a, w):
        ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((N, K, Ho, Wo), a.dtype)
        for rr in range(R):
            for ss in range(S):
                patch = ap[:, :, rr:rr + stride * Ho:stride, ss:ss + stride * Wo:stride]
                out += np.einsum("nchw,kc->nkhw", patch, w[:, :, rr, ss])
        return [out]
    return [A, Wt], [Out], ref


def conv2d_transpose(N=1, C=3, H=5, W=7, K=4, R=4, stride=2, pad=1, bias_relu=False):
    """PyTorch's conv_transpose2d (weight C x K x R x R) in its gather form, the border tested
    inside the reduction: output row y takes input rows (y + pad) // stride - t, taps
    (y + pad) % stride + stride * t (R a multiple of stride); optionally + bias and ReLU as a
    consumer stage."""
    assert R % stride == 0, "the gather form needs the kernel a multiple of the stride"
    A = te.placeholder((N, C, H, W), name="A")
    Wt = te.placeholder((C, K, R, R), name="W")
    B = te.placeholder((K,), name="B")
    taps = R // stride
    Ho, Wo = (H - 1) * stride - 2 * pad + R, (W - 1) * stride - 2 * pad + R
    c = te.reduce_axis((0, C), name="c")
    ty = te.reduce_axis((0, taps), name="ty")
    tx = te.reduce_axis((0, taps), name="tx")

    def at(n, ci, y, x):
        iy, ix = (y + pad) // stride - ty, (x + pad) // stride - tx
        return te.if_then_else(te.all(iy >= 0, iy < H, ix >= 0, ix < W), A[n, ci, iy, ix], 0.0)
    Out = te.compute((N, K, Ho, Wo), lambda n, k, y, x: te.sum(
        at(n, c, y, x) * Wt[c, k, (y + pad) % stride + stride * ty, (x + pad) % stride
                            + stride * tx], axis=[c, ty, tx]), name="Out")
    outs = [Out]
    if bias_relu:
        outs = [te.compute(Out.shape, lambda n, k, y, x: te.maximum(Out[n, k, y, x] + B[k], 0.0),
                           name="Act")]

    def ref(a, w, *b):
        full = np.zeros((N, K, (H - 1) * stride + R, (W - 1) * stride + R), a.dtype)
        for r in range(R):
            for s in range(R):
                full[:, :, r:r + stride * H:stride, s:s + stride * W:stride] += np.einsum(
                    "nchw,ck->nkhw", a, w[:, :, r, s])
        out = full[:, :, pad:pad + Ho, pad:pad + Wo]
        return [np.maximum(out + b[0][None, :, None, None], 0)] if bias_relu else [out]
    return ([A, Wt, B] if bias_relu else [A, Wt]), outs, ref


def conv2d_weight_gradient(C=4, H=6, W=6, K=32, R=3, dtype="float32"):
    """A 3x3 convolution's weight gradient (no padding): ``wgrad[k, c, r, s]`` sums the output
    gradient ``G[0, k, y, x]`` times the input ``X[0, c, y + r, x + s]``; it ends in the 3 of
    its window, shorter than any vector."""
    X = te.placeholder((1, C, H, W), dtype, "x")
    Ho, Wo = H - R + 1, W - R + 1
    G = te.placeholder((1, K, Ho, Wo), dtype, "g")
    a = te.reduce_axis((0, 1), name="a")
    y = te.reduce_axis((0, Ho), name="y")
    xx = te.reduce_axis((0, Wo), name="xx")
    wgrad = te.compute((K, C, R, R), lambda o, c, r, s: te.sum(
        G[a, o, y, xx] * X[a, c, y + r, xx + s], axis=[a, y, xx]), name="wgrad")

    def ref(g, x):
        win = np.lib.stride_tricks.sliding_window_view(x[0], (Ho, Wo), axis=(1, 2))
        return [np.einsum("oyx,crsyx->ocrs", g[0], win)]       # win: c, r, s, y, x
    return [G, X], [wgrad], ref


def depthwise_conv(C=6, H=10, W=9, R=3, pad=1):
    A = te.placeholder((C, H, W), name="A")
    Wt = te.placeholder((C, R, R), name="W")
    Pad = te.compute((C, H + 2 * pad, W + 2 * pad), lambda c, h, w: te.if_then_else(
        te.all(h >= pad, h < H + pad, w >= pad, w < W + pad), A[c, h - pad, w - pad], 0.0),
        name="Pad")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, R), name="s")
    Ho, Wo = H + 2 * pad - R + 1, W + 2 * pad - R + 1
    Out = te.compute((C, Ho, Wo), lambda c, y, x: te.sum(Pad[c, y + r, x + s] * Wt[c, r, s],
                                                         axis=[r, s]), name="Out")

    def ref(a, w):
        ap = np.pad(a, ((0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((C, Ho, Wo), a.dtype)
        for rr in range(R):
            for ss in range(R):
                out += ap[:, rr:rr + Ho, ss:ss + Wo] * w[:, rr, ss][:, None, None]
        return [out]
    return [A, Wt], [Out], ref


def max_pool(C=4, H=12, W=10, P=2, stride=2):
    A = te.placeholder((C, H, W), name="A")
    r = te.reduce_axis((0, P), name="r")
    s = te.reduce_axis((0, P), name="s")
    Ho, Wo = (H - P) // stride + 1, (W - P) // stride + 1
    Out = te.compute((C, Ho, Wo), lambda c, y, x: te.max(A[c, y * stride + r, x * stride + s],
                                                         axis=[r, s]), name="Out")

    def ref(a):
        win = np.lib.stride_tricks.sliding_window_view(a, (P, P), axis=(1, 2))
        return [win[:, ::stride, ::stride].max(axis=(3, 4))]
    return [A], [Out], ref


def softmax(M=9, N=35):
    X = te.placeholder((M, N), name="X")
    k1 = te.reduce_axis((0, N), name="k1")
    Mx = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="Mx")
    E = te.compute((M, N), lambda i, j: te.exp(X[i, j] - Mx[i]), name="E")
    k2 = te.reduce_axis((0, N), name="k2")
    S = te.compute((M,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Out = te.compute((M, N), lambda i, j: E[i, j] / S[i], name="Out")

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return [e / e.sum(1, keepdims=True)]
    return [X], [Out], ref


def layer_norm(M=7, N=40, eps=1e-5):
    X = te.placeholder((M, N), name="X")
    g = te.placeholder((N,), name="gamma")
    b = te.placeholder((N,), name="beta")
    k = te.reduce_axis((0, N), name="k")
    Mean = te.compute((M,), lambda i: te.sum(X[i, k], axis=k) , name="Sum")
    k2 = te.reduce_axis((0, N), name="k2")
    n = N if isinstance(N, int) else N.astype("float32")       # a symbolic extent: cast it
    Var = te.compute((M,), lambda i: te.sum((X[i, k2] - Mean[i] / n) * (X[i, k2] - Mean[i] / n),
                                            axis=k2), name="Var")
    Out = te.compute((M, N), lambda i, j: (X[i, j] - Mean[i] / n) / te.sqrt(Var[i] / n + eps)
                     * g[j] + b[j], name="Out")

    def ref(x, gamma, beta):
        mu = x.mean(1, keepdims=True)
        var = x.var(1, keepdims=True)
        return [(x - mu) / np.sqrt(var + eps) * gamma + beta]
    return [X, g, b], [Out], ref


def multi_axis_reduce(A0=5, A1=6, A2=7, A3=3):
    X = te.placeholder((A0, A1, A2, A3), name="X")
    r1 = te.reduce_axis((0, A1), name="r1")
    r2 = te.reduce_axis((0, A2), name="r2")
    S = te.compute((A0, A3), lambda i, j: te.sum(X[i, r1, r2, j], axis=[r1, r2]), name="S")
    q1 = te.reduce_axis((0, A1), name="q1")
    q2 = te.reduce_axis((0, A2), name="q2")
    Mx = te.compute((A0, A3), lambda i, j: te.max(X[i, q1, q2, j], axis=[q1, q2]), name="Mx")
    return [X], [S, Mx], lambda x: [x.sum(axis=(1, 2)), x.max(axis=(1, 2))]


def swiglu(N=17, K=40, M=35):
    """Two reductions over one input feeding one consumer: silu(X @ W1) * (X @ W3)."""
    X = te.placeholder((N, K), name="X")
    W1 = te.placeholder((K, M), name="W1")
    W3 = te.placeholder((K, M), name="W3")
    k = te.reduce_axis((0, K), name="k")
    k3 = te.reduce_axis((0, K), name="k3")
    G = te.compute((N, M), lambda i, j: te.sum(X[i, k] * W1[k, j], axis=k), name="G")
    U = te.compute((N, M), lambda i, j: te.sum(X[i, k3] * W3[k3, j], axis=k3), name="U")
    H = te.compute((N, M), lambda i, j: G[i, j] * te.sigmoid(G[i, j]) * U[i, j], name="H")

    def ref(x, w1, w3):
        g = x @ w1
        return [g / (1 + np.exp(-g)) * (x @ w3)]
    return [X, W1, W3], [H], ref


def causal_multihead_attention(q, k, v):
    """(heads, S, D) attention, the scores of later keys masked out by an if_then_else."""
    hh, s, d = q.shape
    scale = 1.0 / math.sqrt(d)
    rd = te.reduce_axis((0, d), name="rd")
    sc = te.compute((hh, s, s), lambda h, i, j: te.if_then_else(
        j <= i, te.sum(q[h, i, rd] * k[h, j, rd], axis=rd) * scale, -1e30), name="sc")
    rj = te.reduce_axis((0, s), name="rj")
    mx = te.compute((hh, s), lambda h, i: te.max(sc[h, i, rj], axis=rj), name="mx")
    e = te.compute((hh, s, s), lambda h, i, j: te.exp(sc[h, i, j] - mx[h, i]), name="e")
    rj2 = te.reduce_axis((0, s), name="rj2")
    den = te.compute((hh, s), lambda h, i: te.sum(e[h, i, rj2], axis=rj2), name="den")
    rj3 = te.reduce_axis((0, s), name="rj3")
    return te.compute((hh, s, d), lambda h, i, c: te.sum(e[h, i, rj3] * v[h, rj3, c], axis=rj3)
                      / den[h, i], name="att")


def elementwise_chain(N=50, M=23):
    X = te.placeholder((N, M), name="X")
    Y = te.placeholder((N, M), name="Y")
    T1 = te.compute((N, M), lambda i, j: te.tanh(X[i, j]) * te.sigmoid(Y[i, j]), name="T1")
    T2 = te.compute((N, M), lambda i, j: te.exp(-te.abs(T1[i, j])) + te.log(1.0 + Y[i, j] * Y[i, j])
                    , name="T2")
    Out = te.compute((N, M), lambda i, j: te.if_then_else(
        X[i, j] > 0.0, te.sqrt(T2[i, j]) + te.power(T2[i, j], 1.5),
        te.maximum(T2[i, j], 0.5) - te.erf(X[i, j])), name="Out")

    def ref(x, y):
        import math
        t1 = np.tanh(x) * (1 / (1 + np.exp(-y)))
        t2 = np.exp(-np.abs(t1)) + np.log(1 + y * y)
        erf = np.vectorize(math.erf)(x.astype(np.float64)).astype(x.dtype)
        return [np.where(x > 0, np.sqrt(t2) + t2 ** 1.5, np.maximum(t2, 0.5) - erf)]
    return [X, Y], [Out], ref


EINSUMS = [("ij,jk->ik", [(6, 5), (5, 7)]), ("bij,bjk->bik", [(2, 4, 3), (2, 3, 5)]),
           ("ii->i", [(6, 6)]), ("ij->", [(4, 9)]), ("ijk->kji", [(3, 4, 5)]),
           ("i,i->", [(17,), (17,)]), ("ij,j->i", [(8, 6), (6,)]), ("ik,kj", [(3, 4), (4, 2)])]


def einsum(subscripts, shapes):
    ins = [te.placeholder(sh, name=f"T{n}") for n, sh in enumerate(shapes)]
    out = te.einsum(subscripts, *ins)

    def ref(*arrays):
        r = np.einsum(subscripts, *arrays)
        return [np.asarray(r).reshape(out.shape)]
    return ins, [out], ref


ZOO = {f.__name__: f for f in (gemm, batch_matmul, matmul_transposed, conv2d, depthwise_conv,
                               max_pool, softmax, layer_norm, multi_axis_reduce,
                               elementwise_chain, swiglu)}
