"""Serial and vectorized loops, index arithmetic, casts and a GEMM nest, against NumPy."""
import numpy as np
import pytest

from cgutil import (PAR, SERIAL, VEC, BinOp, Binary, Cast, CmpOp, LetStmt, LogicOp, Store, Var, arg,
                    bmax, bmin, compile_func, const, func, ld, loop, seq)

RNG = np.random.default_rng(7)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def add_kernel(n, kind, dtype="float32"):
    A, B, C = arg("A", dtype, n), arg("B", dtype, n), arg("C", dtype, n)
    i = Var("i")
    return compile_func(func(f"add_{n}", (A, B, C), loop(i, n, Store(C, i, ld(A, i) + ld(B, i)),
                                                          kind)))


@pytest.mark.parametrize("n,kind", [(100, SERIAL), (16, VEC), (64, VEC), (100, VEC), (7, VEC),
                                    (1, VEC), (1000, VEC)])
def test_elementwise_add(n, kind):
    a, b, c = rand(n), rand(n), np.zeros(n, np.float32)
    add_kernel(n, kind)(a, b, c)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("dtype", ["float64", "float16", "int8", "int32", "int64", "uint8"])
def test_elementwise_dtypes_vectorized(dtype):
    a, b = (RNG.integers(0, 50, 100).astype(dtype) for _ in range(2))
    c = np.zeros(100, dtype)
    add_kernel(100, VEC, dtype)(a, b, c)
    np.testing.assert_array_equal(c, a + b)


def test_vector_tail_does_not_touch_memory_past_the_end():
    from cgutil import guarded
    n = 100
    a, b = guarded(rand(n)), guarded(rand(n))
    c = guarded(np.zeros(n, np.float32))
    add_kernel(n, VEC)(a, b, c)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("kind", [SERIAL, VEC])
def test_strided_gather_and_broadcast(kind):
    # O[j, i] = A[2*i + 1] * S[j] + A[i // 3]   (stride 2, loop-invariant and non-affine reads)
    n, m = 40, 3
    A, S, O = arg("A", "float32", 2 * n + 1), arg("S", "float32", m), arg("O", "float32", m, n)
    i, j = Var("i"), Var("j")
    val = ld(A, i * 2 + 1) * ld(S, j) + ld(A, Binary(BinOp.FLOORDIV, i, const(3), "int64"))
    k = compile_func(func("gather", (A, S, O), loop(j, m, loop(i, n, Store(O, j * n + i, val),
                                                                 kind))))
    a, s, o = rand(2 * n + 1), rand(m), np.zeros((m, n), np.float32)
    k(a, s, o)
    idx = np.arange(n)
    np.testing.assert_allclose(o, a[2 * idx + 1] * s[:, None] + a[idx // 3], rtol=1e-6,
                               atol=1e-6)   # FMA contraction
    if kind is VEC:     # stride 2 and i // 3: window loads and shuffles (test_window_loads.py)
        assert "masked.gather" not in k.get_source("llvm-unopt")
        assert "shufflevector" in k.get_source("llvm-unopt")


def test_strided_scatter_and_let_bound_vectors():
    n = 24
    A, O = arg("A", "float32", n), arg("O", "float32", 3 * n)
    i, t = Var("i"), Var("t", "float32")
    body = LetStmt(t, ld(A, i) * 2.0, Store(O, i * 3 + 2, t + 1.0))
    k = compile_func(func("scatter", (A, O), loop(i, n, body, VEC)))
    a, o = rand(n), np.zeros(3 * n, np.float32)
    k(a, o)
    np.testing.assert_allclose(o[2::3], a * 2 + 1)
    assert not o[0::3].any() and not o[1::3].any()


def test_reduction_over_vectorized_axis_falls_back_to_serial():
    # C[0] = C[0] + A[k] with k "vectorized": a loop-carried reduction must stay correct
    A, C = arg("A", "float32", 50), arg("C", "float32", 1)
    k_ = Var("k")
    body = loop(k_, 50, Store(C, const(0), ld(C, 0) + ld(A, k_)), VEC)
    k = compile_func(func("red", (A, C), body))
    a, c = rand(50), np.zeros(1, np.float32)
    k(a, c)
    np.testing.assert_allclose(c[0], a.sum(dtype=np.float64), rtol=1e-5)


@pytest.mark.parametrize("variant", ["serial", "vector_j", "parallel_i"])
def test_gemm(variant):
    M, N, K = 24, 40, 17
    A, B, C = arg("A", "float32", M, K), arg("B", "float32", K, N), arg("C", "float32", M, N)
    i, j, k = Var("i"), Var("j"), Var("k")
    acc = Store(C, i * N + j, ld(C, i * N + j) + ld(A, i * K + k) * ld(B, k * N + j))
    if variant == "serial":
        body = loop(i, M, loop(j, N, seq(Store(C, i * N + j, const(0.0, "float32")),
                                          loop(k, K, acc))))
    else:
        j0 = Var("j0")
        init = loop(j0, N, Store(C, i * N + j0, const(0.0, "float32")), VEC)
        body = loop(i, M, seq(init, loop(k, K, loop(j, N, acc, VEC))),
                    PAR if variant == "parallel_i" else SERIAL)
    kern = compile_func(func("gemm", (A, B, C), body))
    a, b, c = rand(M, K), rand(K, N), np.full((M, N), np.nan, np.float32)
    kern(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", [SERIAL, VEC])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_floor_division_and_modulo_follow_python(dtype, kind):
    vals = [-7, -6, -5, -1, 0, 1, 5, 6, 7, -128 if dtype == "int8" else -100, 127]
    pairs = [(a, b) for a in vals for b in (-3, -1, 1, 2, 3, 7, -7, 0)]
    n = len(pairs)
    X, Y = arg("X", dtype, n), arg("Y", dtype, n)
    Q, R, Q3, R3 = (arg(name, dtype, n) for name in ("Q", "R", "Q3", "R3"))
    i = Var("i")
    x, y = ld(X, i), ld(Y, i)
    body = seq(Store(Q, i, Binary(BinOp.FLOORDIV, x, y, dtype)),
               Store(R, i, Binary(BinOp.MOD, x, y, dtype)),
               Store(Q3, i, Binary(BinOp.FLOORDIV, x, const(3, dtype), dtype)),
               Store(R3, i, Binary(BinOp.MOD, x, const(-3, dtype), dtype)))
    k = compile_func(func("divmod", (X, Y, Q, R, Q3, R3), loop(i, n, body, kind),
                          outputs=["Q", "R", "Q3", "R3"]))
    xs = np.array([a for a, _ in pairs], dtype)
    ys = np.array([b for _, b in pairs], dtype)
    outs = [np.zeros(n, dtype) for _ in range(4)]
    k(xs, ys, *outs)
    wrap = lambda v: np.array(v).astype(dtype)     # noqa: E731  (INT_MIN // -1 wraps)
    py_q = [a // b if b else 0 for a, b in pairs]
    py_r = [a % b if b else 0 for a, b in pairs]
    np.testing.assert_array_equal(outs[0], wrap(py_q))
    np.testing.assert_array_equal(outs[1], wrap(py_r))
    np.testing.assert_array_equal(outs[2], [a // 3 for a, _ in pairs])
    np.testing.assert_array_equal(outs[3], [a % -3 for a, _ in pairs])


def test_truncating_division_min_max_and_casts():
    n = 32
    X, O, F, I8 = arg("X", "int64", n), arg("O", "int64", n), arg("F", "float32", n), \
        arg("I8", "int8", n)
    i = Var("i")
    x = ld(X, i)
    body = seq(Store(O, i, Binary(BinOp.TDIV, x, const(4), "int64") * 10
                     + Binary(BinOp.TMOD, x, const(4), "int64")),
               Store(F, i, bmax(Cast("float32", x), const(5.0)) - bmin(Cast("float32", x),
                                                                        const(3.0))),
               Store(I8, i, Cast("int8", Cast("float32", x) * const(-1.5))))
    k = compile_func(func("misc", (X, O, F, I8), loop(i, n, body, VEC), outputs=["O", "F", "I8"]))
    x = np.arange(n, dtype=np.int64)
    o, f, i8 = np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, np.int8)
    k(x, o, f, i8)
    np.testing.assert_array_equal(o, x // 4 * 10 + x % 4)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(f, np.maximum(xf, 5) - np.minimum(xf, 3))
    np.testing.assert_array_equal(i8, np.trunc(xf * -1.5).astype(np.int8))


def test_bool_buffers_and_logic():
    n = 40
    X, M, O = arg("X", "float32", n), arg("M", "bool", n), arg("O", "bool", n)
    i = Var("i")
    from cgutil import Compare
    from einloop.ir.expr import Logical, Not
    cond = Logical(LogicOp.OR,
                   Logical(LogicOp.AND, Compare(CmpOp.GT, ld(X, i), const(0.0)), ld(M, i)),
                   Not(Compare(CmpOp.LT, i, const(10))))
    k = compile_func(func("logic", (X, M, O), loop(i, n, Store(O, i, cond), VEC)))
    x, m, o = rand(n), RNG.integers(0, 2, n).astype(bool), np.zeros(n, bool)
    k(x, m, o)
    np.testing.assert_array_equal(o, ((x > 0) & m) | ~(np.arange(n) < 10))


def test_non_affine_read_modify_write_falls_back_to_serial():
    # C[f // 4] = C[f // 4] + A[f] over a fused, "vectorized" axis: lanes would collide
    A, C = arg("A", "float32", 64), arg("C", "float32", 16)
    f = Var("f")
    q = Binary(BinOp.FLOORDIV, f, const(4), "int64")
    k = compile_func(func("fused_red", (A, C), loop(f, 64, Store(C, q, ld(C, q) + ld(A, f)), VEC)))
    a, c = rand(64), np.zeros(16, np.float32)
    k(a, c)
    np.testing.assert_allclose(c, a.reshape(16, 4).sum(axis=1), rtol=1e-5, atol=1e-6)
    assert "masked.scatter" not in k.get_source("llvm-unopt")


@pytest.mark.parametrize("n", [2, 3, 50, 64, 65, 130])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int64"])
def test_vectorized_matches_serial_on_odd_extents(dtype, n):
    # O[i] = select(i % 3 != 0, A[2 * i] + A[n - 1 - i // 2], B[0]) ; if A[i] > 0: P[i] = A[i]
    A, B = arg("A", dtype, 2 * n), arg("B", dtype, 1)
    O, P = arg("O", dtype, n), arg("P", dtype, n)
    from cgutil import Compare, IfThenElse, select
    i = Var("i")
    half = Binary(BinOp.FLOORDIV, i, const(2), "int64")
    val = select(Compare(CmpOp.NE, Binary(BinOp.MOD, i, const(3), "int64"), const(0)),
                 ld(A, i * 2) + ld(A, (n - 1) - half), ld(B, 0))
    body = seq(Store(O, i, val),
               IfThenElse(Compare(CmpOp.GT, ld(A, i), const(0, dtype)), Store(P, i, ld(A, i))))
    a = (RNG.standard_normal(2 * n) * 10).astype(dtype)
    b = np.array([7], dtype)
    results = []
    for kind in (SERIAL, VEC):
        k = compile_func(func(f"odd_{kind.value}", (A, B, O, P), loop(i, n, body, kind),
                              outputs=["O", "P"]))
        o, p = np.zeros(n, dtype), np.zeros(n, dtype)
        k(a, b, o, p)
        results.append((o, p))
    idx = np.arange(n)
    expect_o = np.where(idx % 3 != 0, a[2 * idx] + a[n - 1 - idx // 2], b[0])
    np.testing.assert_array_equal(results[0][0], expect_o.astype(dtype))
    np.testing.assert_array_equal(results[0][1], np.where(a[:n] > 0, a[:n], 0).astype(dtype))
    for x, y in zip(results[0], results[1]):
        np.testing.assert_array_equal(x, y)
