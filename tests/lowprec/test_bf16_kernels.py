"""bfloat16 kernels against NumPy with ml_dtypes, under the default schedule and every generic
strategy (split, reorder, fuse, vectorize, parallel, unroll, compute_at, cache_write, inline).

Arithmetic on bfloat16 values rounds each result to bfloat16, as ml_dtypes does (computed in
float32), so elementwise kernels and a bfloat16 accumulation in a fixed order match bit for bit;
a matmul of bfloat16 inputs cast to float32 matches NumPy's float32 matmul of the widened inputs
within float32 tolerance, here and when auto-scheduled."""
import ml_dtypes
import numpy as np
import pytest

from einloop import autotune, create_schedule, te

import strategies
from bf16util import BF16, assert_same_bits, random_bf16, run

M, N, K = 13, 37, 29          # odd sizes: every split leaves a tail


def test_arithmetic_rounds_every_operation_as_ml_dtypes_does():
    A = te.placeholder((N,), "bfloat16", name="A")
    B = te.placeholder((N,), "bfloat16", name="B")
    C = te.compute((N,), lambda i: (A[i] * B[i] + A[i]) / (B[i] - 3.0) * 0.1, name="C")
    D = te.compute((N,), lambda i: te.maximum(A[i], B[i]) - te.minimum(A[i], 0.5), name="D")
    a, b = random_bf16(N, seed=1), random_bf16(N, seed=2, low=-100, high=100)
    for vector in (False, True):
        s = create_schedule([C, D])
        if vector:
            for t in (C, D):
                s[t].vectorize(s[t].split(t.op.axis[0], factor=8)[1])
        c, d = run(s, [A, B], [C, D], [a, b])
        tenth = ml_dtypes.bfloat16(0.1)
        assert_same_bits(c, (a * b + a) / (b - BF16.type(3.0)) * tenth)
        assert_same_bits(d, np.maximum(a, b) - np.minimum(a, BF16.type(0.5)))


def test_a_bfloat16_result_differs_from_one_rounded_once():
    """The per-operation rounding is real: a*b+a rounded after each step is not the float32
    result rounded once, for some of these inputs (else the test above proves nothing)."""
    a, b = random_bf16(N, seed=1), random_bf16(N, seed=2, low=-100, high=100)
    once = (a.astype(np.float32) * b.astype(np.float32) + a.astype(np.float32)).astype(BF16)
    assert (once.view(np.uint16) != (a * b + a).view(np.uint16)).any()


def test_math_functions_compute_in_float32_and_round():
    A = te.placeholder((N,), "bfloat16", name="A")
    S = te.compute((N,), lambda i: te.sqrt(te.abs(A[i])), name="S")
    E = te.compute((N,), lambda i: te.exp(A[i]) + te.tanh(A[i]), name="E")
    a = random_bf16(N, seed=4, low=-5, high=5)
    s = create_schedule([S, E])
    s[E].vectorize(s[E].split(E.op.axis[0], factor=8)[1])
    sq, e = run(s, [A], [S, E], [a])
    assert_same_bits(sq, np.sqrt(np.abs(a)))        # correctly rounded, as float32's sqrt
    assert e.dtype == BF16
    want = (np.exp(a.astype(np.float64)).astype(BF16).astype(np.float64)
            + np.tanh(a.astype(np.float64)).astype(BF16).astype(np.float64))
    # exp and tanh are float32 approximations: at most a bfloat16 ulp apart where they round
    np.testing.assert_allclose(e.astype(np.float64), want, rtol=2 ** -7, atol=2 ** -7)


def test_comparisons_and_selects_on_bfloat16():
    A = te.placeholder((N,), "bfloat16", name="A")
    B = te.placeholder((N,), "bfloat16", name="B")
    C = te.compute((N,), lambda i: te.if_then_else(A[i] > B[i], A[i], B[i] * 2.0), name="C")
    P = te.compute((N,), lambda i: (A[i] <= 0.25).astype("int32"), name="P")
    a, b = random_bf16(N, seed=5), random_bf16(N, seed=6)
    a[:4] = [np.nan, 0.25, -0.0, 1.0]
    b[:4] = [1.0, np.nan, 0.0, 1.0]
    s = create_schedule([C, P])
    s[C].vectorize(s[C].split(C.op.axis[0], factor=4)[1])
    c, p = run(s, [A, B], [C, P], [a, b])
    assert_same_bits(c, np.where(a > b, a, b * BF16.type(2.0)))
    np.testing.assert_array_equal(p, (a <= BF16.type(0.25)).astype(np.int32))


def _sequential_sum_bf16(x):
    """Row sums of bfloat16 *x*, accumulated in bfloat16 from left to right (as declared)."""
    acc = np.zeros(x.shape[0], BF16)
    for k in range(x.shape[1]):
        acc = acc + x[:, k]
    return acc


@pytest.mark.parametrize("strategy", strategies.ALL, ids=lambda f: f.__name__)
def test_a_bfloat16_sum_rounds_each_step_under_every_strategy(strategy):
    """A reduction in bfloat16 rounds its accumulator after every addition; every strategy
    keeps the order of the reduction, so results are bit-exact."""
    A = te.placeholder((M, K), "bfloat16", name="A")
    k = te.reduce_axis((0, K), name="k")
    T = te.compute((M, K), lambda i, j: A[i, j] * A[i, j], name="T")
    S = te.compute((M,), lambda i: te.sum(T[i, k], axis=k), name="S")
    a = random_bf16((M, K), seed=8)
    (got,) = run(strategy([S]), [A], [S], [a])
    assert_same_bits(got, _sequential_sum_bf16(a * a))


def widened(x):
    return x.astype("float32")


def matmul_bf16(m, n, k_):
    X = te.placeholder((m, k_), "bfloat16", name="X")
    W = te.placeholder((k_, n), "bfloat16", name="W")
    k = te.reduce_axis((0, k_), name="k")
    Y = te.compute((m, n), lambda i, j: te.sum(widened(X[i, k]) * widened(W[k, j]), axis=k),
                   name="Y")
    return X, W, Y


@pytest.mark.parametrize("strategy", strategies.ALL, ids=lambda f: f.__name__)
def test_matmul_of_bfloat16_inputs_in_float32(strategy):
    X, W, Y = matmul_bf16(M, N, K)
    x, w = random_bf16((M, K), seed=9), random_bf16((K, N), seed=10)
    (y,) = run(strategy([Y]), [X, W], [Y], [x, w])
    np.testing.assert_allclose(y, x.astype(np.float32) @ w.astype(np.float32), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("strategy", strategies.ALL, ids=lambda f: f.__name__)
def test_bfloat16_stages_feed_a_float32_matmul_with_a_bfloat16_output(strategy):
    """A bfloat16 producer (inlined, computed at, or a stage of its own) feeds the matmul, whose
    float32 result is rounded to bfloat16 on the way out."""
    X = te.placeholder((M, K), "bfloat16", name="X")
    W = te.placeholder((K, N), "bfloat16", name="W")
    H = te.compute((M, K), lambda i, j: X[i, j] * X[i, j] + 1.0, name="H")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(widened(H[i, k]) * widened(W[k, j]), axis=k),
                   name="Y")
    Z = te.compute((M, N), lambda i, j: Y[i, j].astype("bfloat16"), name="Z")
    x, w = random_bf16((M, K), seed=11), random_bf16((K, N), seed=12)
    (z,) = run(strategy([Z]), [X, W], [Z], [x, w])
    h = (x * x + BF16.type(1.0)).astype(np.float32)
    want = (h @ w.astype(np.float32)).astype(BF16)
    assert z.dtype == BF16
    # float32 sums in another order may cross a bfloat16 rounding boundary: one bfloat16 ulp
    np.testing.assert_allclose(z.astype(np.float32), want.astype(np.float32), rtol=2 ** -7)


def test_auto_scheduled_bfloat16_matmul_matches_numpy(tmp_path):
    X, W, Y = matmul_bf16(24, 40, 32)
    s, args = autotune.auto_schedule(
        [X, W, Y], n_trial=4, log=str(tmp_path / "bf16.jsonl"), seed=0, quiet=True,
        measure_option=autotune.measure_option(number=1, repeat=1, timeout=20, n_parallel=1))
    assert [t.dtype for t in args] == ["bfloat16", "bfloat16", "float32"]
    x, w = random_bf16((24, 32), seed=13), random_bf16((32, 40), seed=14)
    (y,) = run(s, args[:2], args[2:], [x, w])
    np.testing.assert_allclose(y, x.astype(np.float32) @ w.astype(np.float32), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("strategy", [strategies.default, strategies.tile_vectorize_parallel,
                                      strategies.cache_write_tiles], ids=lambda f: f.__name__)
def test_float16_storage_matmul_in_float32(strategy):
    """float16 the same way: half-precision storage, float32 arithmetic."""
    X = te.placeholder((M, K), "float16", name="X")
    W = te.placeholder((K, N), "float16", name="W")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(widened(X[i, k]) * widened(W[k, j]), axis=k),
                   name="Y")
    rng = np.random.default_rng(15)
    x = rng.uniform(-2, 2, (M, K)).astype(np.float16)
    w = rng.uniform(-2, 2, (K, N)).astype(np.float16)
    (y,) = run(strategy([Y]), [X, W], [Y], [x, w])
    np.testing.assert_allclose(y, x.astype(np.float32) @ w.astype(np.float32), rtol=1e-5,
                               atol=1e-5)
