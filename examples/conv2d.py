"""conv2d, NCHW, float32, with padding and stride: the declaration and a hand schedule.

The schedule pads the input once (a root stage), packs the weights so that a block of ``kb``
output channels is contiguous, and accumulates a ``kb x xb`` output tile in registers: for each
(c, r, s) it loads one vector of input pixels along x and multiplies it by ``kb`` broadcast
weights.  Rows of output tiles run on all cores.

Tune it from the command line: ``conv2d`` (the plain declaration) is auto-scheduled with no
template, ``conv2d_template`` is the tunable template (registered as "conv2d"):

    einloop tune examples/conv2d.py:conv2d --args 1 64 56 56 64 3 3 --trials 200
    einloop tune examples/conv2d.py:conv2d_template --args 1 64 56 56 64 3 3 --trials 200

Run it:  python examples/conv2d.py
"""
import numpy as np

from einloop import te, create_schedule, build, autotune


def pad_input(A, pad):
    """A zero-padded copy of NCHW input *A* (the guarded read is never out of bounds)."""
    N, C, H, W = A.shape
    return te.compute((N, C, H + 2 * pad, W + 2 * pad), lambda n, c, h, w: te.if_then_else(
        te.all(h >= pad, h < H + pad, w >= pad, w < W + pad), A[n, c, h - pad, w - pad], 0.0),
        name="Pad")


def declare(N, C, H, W, K, R, S, pad=1, stride=1, kb=16, dtype="float32"):
    """Out[n, k, y, x] = sum_{c, r, s} Pad[n, c, y*stride + r, x*stride + s] * Wt[k, c, r, s]."""
    A = te.placeholder((N, C, H, W), dtype, name="A")
    Wt = te.placeholder((K, C, R, S), dtype, name="W")
    Pad = pad_input(A, pad)
    Hp, Wp = H + 2 * pad, W + 2 * pad
    kt = -(-K // kb)
    WP = te.compute((kt, C, R, S, kb),
                    lambda ko, c, r, s, ki: te.if_then_else(ko * kb + ki < K,
                                                            Wt[ko * kb + ki, c, r, s], 0.0),
                    name="WP")
    Ho, Wo = (Hp - R) // stride + 1, (Wp - S) // stride + 1
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    Out = te.compute(
        (N, K, Ho, Wo),
        lambda n, k, y, x: te.sum(Pad[n, c, y * stride + r, x * stride + s]
                                  * WP[k // kb, c, r, s, k % kb], axis=[c, r, s]),
        name="Out")
    return A, Wt, Pad, WP, Out


def schedule(N, C, H, W, K, R, S, pad=1, stride=1, kb=16, xb=16, reduce_order="c,r,s",
             unroll_s=False):
    """The hand schedule: a kb x xb register tile, x vectorized, output rows in parallel."""
    A, Wt, Pad, WP, Out = declare(N, C, H, W, K, R, S, pad, stride, kb)
    s = create_schedule(Out)
    OC = s.cache_write(Out, "local")
    n, k, y, x = s[Out].op.axis
    ko, ki = s[Out].split(k, factor=kb)
    xo, xi = s[Out].split(x, factor=xb)
    s[Out].reorder(n, ko, y, xo, ki, xi)
    s[Out].vectorize(xi)
    s[Out].parallel(s[Out].fuse(n, ko, y))
    s[OC].compute_at(s[Out], xo)
    on, ok, oy, ox = s[OC].op.axis
    c, r, sx = s[OC].op.reduce_axis
    s[OC].reorder(on, oy, *([c, r, sx] if reduce_order == "c,r,s" else [r, sx, c]), ok, ox)
    s[OC].unroll(ok)
    if unroll_s:
        s[OC].unroll(sx)
    s[OC].vectorize(ox)
    pn, pc, ph, pw = s[Pad].op.axis
    s[Pad].parallel(s[Pad].fuse(pn, pc))
    s[Pad].vectorize(pw)
    return s, [A, Wt, Out]


@autotune.template("conv2d")
def conv2d_template(N, C, H, W, K, R, S, pad=1, stride=1):
    """The tunable conv2d: the hand schedule's tile sizes, reduction order and unrolling."""
    cfg = autotune.get_config()
    Wo = (W + 2 * pad - S) // stride + 1
    cfg.define_split("tile_k", K, num_outputs=2, policy="factors",
                     filter=lambda e: 2 <= e.size[-1] <= 32)
    cfg.define_split("tile_x", Wo, num_outputs=2,
                     candidate=[[-1, x] for x in (8, 14, 16, 28, 32) if x <= Wo] or [[-1, Wo]])
    cfg.define_knob("reduce_order", ["c,r,s", "r,s,c"])
    cfg.define_knob("unroll_s", [False, True])
    return schedule(N, C, H, W, K, R, S, pad, stride, kb=cfg["tile_k"].size[-1],
                    xb=cfg["tile_x"].size[-1], reduce_order=cfg["reduce_order"].val,
                    unroll_s=cfg["unroll_s"].val)


def conv2d(N, C, H, W, K, R, S, pad=1, stride=1):
    """The plain declaration (pad, then convolve) as a function returning its tensors
    [A, W, Out]: what ``autotune.auto_schedule(conv2d(...), ...)`` schedules without a
    template."""
    A = te.placeholder((N, C, H, W), name="A")
    Wt = te.placeholder((K, C, R, S), name="W")
    Pad = pad_input(A, pad)
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    Out = te.compute((N, K, Ho, Wo), lambda n, k, y, x: te.sum(
        Pad[n, c, y * stride + r, x * stride + s] * Wt[k, c, r, s], axis=[c, r, s]), name="Out")
    return [A, Wt, Out]


def default(N, C, H, W, K, R, S, pad=1, stride=1):
    """The plain declaration (pad, then convolve) under the default schedule."""
    A, Wt, Out = conv2d(N, C, H, W, K, R, S, pad, stride)
    return create_schedule(Out), [A, Wt, Out]


def reference(a, w, pad=1, stride=1):
    """NumPy conv2d by im2col + matmul (what a NumPy user would write)."""
    n, c, h, wd = a.shape
    k, _, r, s = w.shape
    ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(ap, (r, s), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]                   # n, c, ho, wo, r, s
    ho, wo = win.shape[2], win.shape[3]
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * r * s, ho * wo)
    out = w.reshape(k, c * r * s) @ cols
    return out.reshape(n, k, ho, wo)


if __name__ == "__main__":
    shape = (1, 64, 56, 56, 64, 3, 3)
    s, args = schedule(*shape)
    f = build(s, args)
    a = np.random.rand(1, 64, 56, 56).astype("float32")
    w = np.random.rand(64, 64, 3, 3).astype("float32")
    out = np.empty((1, 64, 56, 56), "float32")
    f(a, w, out)
    np.testing.assert_allclose(out, reference(a, w), rtol=1e-4)
    t = f.time(a, w, out, number=10, repeat=5)
    print(f"conv2d: {2 * 64 * 64 * 9 * 56 * 56 / t.median / 1e9:.1f} GFLOP/s")
