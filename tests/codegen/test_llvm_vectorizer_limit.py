"""LLVM's loop vectorizer is skipped on very large functions: on a heavily unrolled scalar tile
it took ~19 s of O3 (a tuning candidate that timed out); einloop's own vectorized loops do not
need it, and the kernel stays correct."""
import numpy as np

from einloop import te, create_schedule, build, lower
from einloop.codegen import jit
from einloop.codegen.target import Target


def _gemm(M=64, N=64, K=64):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_a_huge_unrolled_scalar_tile_builds_without_the_loop_vectorizer():
    A, B, C = _gemm()
    s = create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=8)
    jo, ji = s[C].split(j, factor=16)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=2)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    for iv in (ii, ki, ji):
        s[C].unroll(iv)                  # 8 x 2 x 16 scalar statements, none vectorized
    text, _, _, loop_vectorize = jit.emit(lower(s, [A, B, C]), Target.parse("llvm"))
    assert text.count("\n") > jit.LOOP_VECTORIZER_MAX_LINES and not loop_vectorize
    f = build(s, [A, B, C])
    a, b = np.random.rand(64, 64).astype("float32"), np.random.rand(64, 64).astype("float32")
    c = np.empty((64, 64), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_an_ordinary_kernel_keeps_the_loop_vectorizer():
    A, B, C = _gemm()
    s = create_schedule(C)
    _, loop_vectorize = jit.emit(lower(s, [A, B, C]), Target.parse("llvm"))[2:]
    assert loop_vectorize
