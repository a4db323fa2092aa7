"""Golden lowered IR: the exact ``str(lower(s, args))`` of three representative schedules.

A change to lowering, simplification or the printer that alters these texts must be deliberate:
review the new text by eye, then update the expected string.  Run with ``EINLOOP_UPDATE_GOLDEN=1``
(and ``-s``) to print the new texts instead of failing.
"""
import os

from einloop import te, create_schedule, lower
from ops import gemm, conv2d


def check(name, actual, expected):
    if os.environ.get("EINLOOP_UPDATE_GOLDEN") == "1":
        print(f"\n--- golden {name} ---\n{actual}\n--- end {name} ---")
        return
    assert actual == expected, (f"lowered IR of {name} changed; if intended, rerun with "
                                f"EINLOOP_UPDATE_GOLDEN=1 -s and paste:\n{actual}")


def test_tiled_gemm():
    """tile + split + reorder, vectorized inner spatial loop, parallel outer loop, unrolled k."""
    (A, B), (C,), _ = gemm(M=16, N=32, K=8)
    s = create_schedule(C)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=2)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    s[C].unroll(ki)
    check("tiled_gemm", str(lower(s, [A, B, C])), GEMM)


def test_conv2d_padding_computed_at():
    """A padding stage computed at the output-row loop of a conv: only the rows it needs."""
    (A, Wt), (Out,), _ = conv2d(N=1, C=2, H=6, W=6, K=3, R=3, S=3, pad=1, stride=1)
    Pad = Out.op.input_tensors[0]
    s = create_schedule(Out)
    n, kk, y, x = s[Out].op.axis
    s[Out].reorder(n, y, kk, x)
    s[Pad].compute_at(s[Out], y)
    s[Out].parallel(y)
    check("conv2d_padding_computed_at", str(lower(s, [A, Wt, Out])), CONV)


def test_reduction_cache_write():
    """A row sum accumulated in a local buffer at a block of rows, written back once."""
    M, N = 8, 32
    X = te.placeholder((M, N), name="X")
    k = te.reduce_axis((0, N), name="k")
    S = te.compute((M,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), name="S")
    s = create_schedule(S)
    SL = s.cache_write(S, "local")
    io, ii = s[S].split(s[S].op.axis[0], factor=4)
    s[SL].compute_at(s[S], io)
    ko, ki = s[SL].split(s[SL].op.reduce_axis[0], factor=8)
    s[SL].reorder(ko, s[SL].op.axis[0], ki)
    s[S].parallel(io)
    check("reduction_cache_write", str(lower(s, [X, S])), ROWSUM)


GEMM = """\
def C(A: float32[16, 8], B: float32[8, 32], C: float32[16, 32]):
  parallel for i.outer in range(4):
    for j.outer in range(4):
      for i.inner in range(4):
        vectorized for j.inner in range(8):
          C[i.outer * 128 + i.inner * 32 + j.outer * 8 + j.inner] = 0.0f
      for k.outer in range(4):
        for i.inner in range(4):
          vectorized for j.inner in range(8):
            C[i.outer * 128 + i.inner * 32 + j.outer * 8 + j.inner] = C[i.outer * 128 + i.inner * 32 + j.outer * 8 + j.inner] + A[i.outer * 32 + i.inner * 8 + k.outer * 2] * B[k.outer * 64 + j.outer * 8 + j.inner]
          vectorized for j.inner in range(8):
            C[i.outer * 128 + i.inner * 32 + j.outer * 8 + j.inner] = C[i.outer * 128 + i.inner * 32 + j.outer * 8 + j.inner] + A[i.outer * 32 + i.inner * 8 + k.outer * 2 + 1] * B[k.outer * 64 + j.outer * 8 + j.inner + 32]"""

CONV = """\
def Out(A: float32[1, 2, 6, 6], W: float32[3, 2, 3, 3], Out: float32[1, 3, 6, 6]):
  parallel for y in range(6):
    allocate Pad: float32[1 * 2 * 3 * 8]
    for c in range(2):
      for h in range(3):
        for w in range(8):
          Pad[c * 24 + h * 8 + w] = select(y + h >= 1 and y + h < 7 and w >= 1 and w < 7, A[c * 36 + y * 6 + h * 6 + w - 7], 0.0f)
    for k in range(3):
      for x in range(6):
        Out[k * 36 + y * 6 + x] = 0.0f
        for c_1 in range(2):
          for r in range(3):
            for s in range(3):
              Out[k * 36 + y * 6 + x] = Out[k * 36 + y * 6 + x] + Pad[c_1 * 24 + r * 8 + x + s] * W[k * 18 + c_1 * 9 + r * 3 + s]"""

ROWSUM = """\
def S(X: float32[8, 32], S: float32[8]):
  parallel for i.outer in range(2):
    allocate S.local: float32[4]
    for i in range(4):
      S.local[i] = 0.0f
    for k.outer in range(4):
      for i in range(4):
        for k.inner in range(8):
          S.local[i] = S.local[i] + X[i.outer * 128 + i * 32 + k.outer * 8 + k.inner] * X[i.outer * 128 + i * 32 + k.outer * 8 + k.inner]
    for i.inner in range(4):
      S[i.outer * 4 + i.inner] = S.local[i.inner]"""
