"""Depthwise conv2d, NCHW, float32, stride 1, as a plain function with its padding stage.

Each channel is convolved with its own R x S filter: ``Out[n, c, y, x] = sum_{r, s}
Pad[n, c, y + r, x + s] * W[c, r, s]``.  Auto-schedule it:

    einloop tune examples/depthwise_conv2d.py:depthwise_conv2d --args 1 128 56 56 3 3 1

Run it (default schedule vs NumPy):  python examples/depthwise_conv2d.py
"""
import numpy as np

from einloop import te


def depthwise_conv2d(N, C, H, W, R, S, pad):
    """A (N, C, H, W), W (C, R, S) -> Out (N, C, Ho, Wo); returns [A, W, Out]."""
    A = te.placeholder((N, C, H, W), name="A")
    Wt = te.placeholder((C, R, S), name="W")
    Pad = te.compute((N, C, H + 2 * pad, W + 2 * pad), lambda n, c, h, w: te.if_then_else(
        te.all(h >= pad, h < H + pad, w >= pad, w < W + pad), A[n, c, h - pad, w - pad], 0.0),
        name="Pad")
    Ho, Wo = H + 2 * pad - R + 1, W + 2 * pad - S + 1
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    Out = te.compute((N, C, Ho, Wo), lambda n, c, y, x: te.sum(
        Pad[n, c, y + r, x + s] * Wt[c, r, s], axis=[r, s]), name="Out")
    return [A, Wt, Out]


def reference(a, w, pad):
    """NumPy: pad, then one shifted multiply-add per filter tap (vectorized over the image)."""
    R, S = w.shape[1:]
    ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    Ho, Wo = ap.shape[2] - R + 1, ap.shape[3] - S + 1
    out = np.zeros(a.shape[:2] + (Ho, Wo), a.dtype)
    for r in range(R):
        for s in range(S):
            out += ap[:, :, r:r + Ho, s:s + Wo] * w[None, :, r, s, None, None]
    return out


if __name__ == "__main__":
    from einloop import build, create_schedule
    shape = (1, 128, 56, 56, 3, 3, 1)
    A, Wt, Out = depthwise_conv2d(*shape)
    f = build(create_schedule(Out), [A, Wt, Out])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 128, 56, 56), dtype=np.float32)
    w = rng.standard_normal((128, 3, 3), dtype=np.float32)
    out = np.empty((1, 128, 56, 56), np.float32)
    f(a, w, out)
    np.testing.assert_allclose(out, reference(a, w, 1), rtol=1e-4, atol=1e-4)
    t = f.time(a, w, out).median
    print(f"depthwise conv2d 1x128x56x56 3x3 (default schedule): {t * 1e3:.3f} ms")
