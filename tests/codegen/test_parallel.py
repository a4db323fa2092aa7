"""Parallel loops (libgomp), local buffers, and thread-count control."""
import numpy as np
import pytest

from cgutil import (PAR, SERIAL, VEC, Allocate, LetStmt, Store, Var, arg, compile_func, const,
                    func, ld, local, loop, seq, temp)

RNG = np.random.default_rng(3)


def scale_rows(rows, cols, inner=VEC):
    """O[i, j] = A[i, j] * 2 + i, parallel over rows."""
    A, O = arg("A", "float32", rows, cols), arg("O", "float32", rows, cols)
    i, j = Var("i"), Var("j")
    from cgutil import Cast
    body = Store(O, i * cols + j, ld(A, i * cols + j) * 2.0 + Cast("float32", i))
    return compile_func(func("rows", (A, O), loop(i, rows, loop(j, cols, body, inner), PAR)))


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("rows", [1, 5, 64])
def test_parallel_rows_with_inner_vector_loop(rows, threads):
    k = scale_rows(rows, 37)
    k.num_threads = threads
    a = RNG.standard_normal((rows, 37)).astype(np.float32)
    o = np.zeros_like(a)
    k(a, o)
    np.testing.assert_allclose(o, a * 2 + np.arange(rows, dtype=np.float32)[:, None])


def test_outlined_worker_is_called_through_gomp():
    src = scale_rows(8, 16).get_source("llvm-unopt")
    assert "GOMP_parallel" in src and "omp_get_num_threads" in src
    assert "noinline" in src and "ptr noalias" in src
    assert "cmpxchg" in src        # iterations are claimed in chunks, not split statically


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 64, 1000])
def test_every_iteration_is_claimed_exactly_once(rows, threads):
    # O[i] = O[i] + 1, parallel over i: an iteration run twice (or never) leaves 2 (or 0)
    O = arg("O", "int32", rows)
    i = Var("i")
    k = compile_func(func("once", (O,), loop(i, rows, Store(O, i, ld(O, i) + 1), PAR)))
    k.num_threads = threads
    o = np.zeros(rows, np.int32)
    for _ in range(3):                     # the claim counter starts afresh on every call
        k(o)
    np.testing.assert_array_equal(o, np.full(rows, 3, np.int32))


def test_thread_count_from_environment(monkeypatch):
    k = scale_rows(16, 16)
    monkeypatch.setenv("EINLOOP_NUM_THREADS", "3")
    assert k.num_threads == 3
    a = np.ones((16, 16), np.float32)
    o = np.zeros_like(a)
    k(a, o)
    np.testing.assert_allclose(o, 2 + np.arange(16)[:, None] + 0 * a)
    k.num_threads = 1
    assert k.num_threads == 1
    monkeypatch.setenv("EINLOOP_NUM_THREADS", "zero")
    k.num_threads = None
    from einloop.errors import ArgumentError
    with pytest.raises(ArgumentError, match="EINLOOP_NUM_THREADS must be a positive integer"):
        k(a, o)


@pytest.mark.parametrize("size", [64, 100_000])   # stack, then malloc (> 256 KiB)
def test_local_buffer_inside_parallel_loop_is_per_thread(size):
    # parallel i: allocate T[size]; for j: T[j] = A[i] + j;  O[i] = sum_j T[j] (serial)
    rows = 12
    A, O = arg("A", "float64", rows), arg("O", "float64", rows)
    T = local("T", "float64", size)
    i, j, j2 = Var("i"), Var("j"), Var("j2")
    from cgutil import Cast
    fill = loop(j, size, Store(T, j, ld(A, i) + Cast("float64", j)), VEC)
    total = seq(Store(O, i, const(0.0, "float64")),
                loop(j2, size, Store(O, i, ld(O, i) + ld(T, j2))))
    body = loop(i, rows, Allocate(T, seq(fill, total)), PAR)
    k = compile_func(func("local", (A, O), body))
    k.num_threads = 2
    a = RNG.standard_normal(rows)
    o = np.zeros(rows)
    k(a, o)
    np.testing.assert_allclose(o, a * size + size * (size - 1) / 2, rtol=1e-9)
    src = k.get_source("llvm-unopt")
    assert ('@"malloc"' in src) == (size * 8 > 256 * 1024)


def test_captured_outer_and_let_variables_and_nested_parallel():
    # for b: let s = b * 100: parallel i: parallel j (runs serially): O[b, i, j] = s + i * 4 + j
    O = arg("O", "int64", 3, 5, 4)
    b, s, i, j = Var("b"), Var("s"), Var("i"), Var("j")
    inner = loop(j, 4, Store(O, b * 20 + i * 4 + j, s + i * 4 + j), PAR)
    body = loop(b, 3, LetStmt(s, b * 100, loop(i, 5, inner, PAR)))
    k = compile_func(func("nest", (O,), body))
    k.num_threads = 2
    o = np.zeros((3, 5, 4), np.int64)
    k(o)
    bb, ii, jj = np.meshgrid(range(3), range(5), range(4), indexing="ij")
    np.testing.assert_array_equal(o, bb * 100 + ii * 4 + jj)
    assert k.get_source("llvm-unopt").count('call void @"GOMP_parallel"') == 1


def test_temp_buffer_shared_by_two_parallel_loops():
    n = 1000
    A, O = arg("A", "float32", n), arg("O", "float32", n)
    T = temp("T", "float32", n)
    i, i2 = Var("i"), Var("i2")
    body = seq(loop(i, n, Store(T, i, ld(A, i) * 3.0), PAR),
               loop(i2, n, Store(O, i2, ld(T, n - 1 - i2) + 1.0), PAR))
    k = compile_func(func("tmp", (A, O), body, temps=(T,)))
    k.num_threads = 2
    a = RNG.standard_normal(n).astype(np.float32)
    o = np.zeros_like(a)
    k(a, o)
    np.testing.assert_allclose(o, a[::-1] * 3 + 1, rtol=1e-6)


def test_serial_kernel_ignores_threads():
    A, O = arg("A", "float32", 4), arg("O", "float32", 4)
    i = Var("i")
    k = compile_func(func("ser", (A, O), loop(i, 4, Store(O, i, ld(A, i)), SERIAL)))
    k.num_threads = 5
    a = np.arange(4, dtype=np.float32)
    o = np.zeros_like(a)
    k(a, o)
    np.testing.assert_array_equal(o, a)


def test_without_libgomp_parallel_loops_run_serially(monkeypatch):
    import ctypes.util  # noqa: F401  (gomp imports it only when it searches)
    from einloop.codegen import jit, parallel
    from einloop.runtime import gomp
    monkeypatch.setattr(jit, "_cache", {})
    monkeypatch.setattr(parallel, "_registered", None)
    monkeypatch.setattr(gomp, "_gomp_state", None)
    monkeypatch.setattr(gomp, "_LIBGOMP_NAMES", ("/nonexistent/libgomp.so.1",))
    monkeypatch.setattr(gomp.ctypes.util, "find_library", lambda name: None)
    # nor any OpenMP runtime already in the process, nor one another layer asked to share
    monkeypatch.setattr(gomp, "runtime_of", lambda library=None: None)
    monkeypatch.setattr(gomp, "_shared", None)
    with pytest.warns(RuntimeWarning, match="libgomp .* not found"):
        k = scale_rows(9, 20, inner=SERIAL)
    assert "GOMP_parallel" not in k.get_source("llvm-unopt")
    a = np.ones((9, 20), np.float32)
    o = np.zeros_like(a)
    k(a, o)
    np.testing.assert_allclose(o, 2 + np.arange(9)[:, None] + 0 * a)
