"""Narrow index accumulators (einloop/schedule/narrow_index.py): a tuple reduction's int64
index kept in int32 lanes where it only labels elements and fits, widened where it is read.

Results must stay NumPy's bit for bit (ties: the first index; NaN: the first NaN), under the
default schedule and hand schedules; the lowered IR shows which accumulators are narrow, and
the vector code for an explicit AVX2 target keeps the index in 8 x i32 lanes.
"""
import re
import warnings

import numpy as np
import pytest

import einloop
from einloop import te
from einloop.errors import VectorizeWarning
from einloop.ir import stmt as S
from einloop.ir.visit import walk_stmt
from einloop.te.tuple_builtins import argmax_reducer

AVX2 = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell"
I64 = np.iinfo(np.int64)


def tied_data(shape, seed=0):
    """Small integers (many ties) as float32; NaNs in row 2 (two) and the last row, an all
    -inf row 0 (ties with the identity) and an all +inf row 1."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, size=shape).astype("float32")
    cols = shape[1]
    x[2 % shape[0], min(5, cols - 1)] = x[2 % shape[0], cols - 1] = np.nan
    x[-1, cols // 2] = np.nan
    x[0, :] = -np.inf
    x[1 % shape[0], :] = np.inf
    return x


def run(s, inputs, outputs, arrays, target=None):
    f = einloop.build(s, list(inputs) + list(outputs))
    results = [np.zeros(t.shape, t.dtype) for t in outputs]
    f(*arrays, *results)
    return results


def buffers_of(s, args):
    """name -> dtype of every buffer the lowered kernel stores to."""
    body = einloop.lower(s, args).body
    return {st.buffer.name: st.buffer.dtype for st in walk_stmt(body) if isinstance(st, S.Store)}


# schedules of a (rows,) argmax stage over (rows, k) ------------------------------------------

def _rfactor(s, st, lanes=8, chains=1):
    """The auto-scheduler's row sketch: the reduction split by lanes * chains, factored out,
    the lanes vectorized (each of *chains* vectors its own accumulator), the rows parallel."""
    ko, ki = st.split(st.op.reduce_axis[0], lanes * chains)
    rf = s[s.rfactor(st.op.output(0), ki, factor_axis=1)[0]]
    i, lane = rf.op.axis
    if chains > 1:
        vo, vi = rf.split(lane, lanes)
        rf.reorder(i, rf.op.reduce_axis[0], vo, vi)
        rf.unroll(vo)
        rf.vectorize(vi)
    else:
        rf.reorder(i, rf.op.reduce_axis[0], lane)
        rf.vectorize(lane)
    rf.parallel(i)
    return rf


def _rfactor_at(s, st):
    """The partials computed at each row of the final stage (a local buffer)."""
    rf = _rfactor(s, st)
    rf.compute_at(st, st.op.axis[0])
    st.parallel(st.op.axis[0])


def _rfactor_vector_final(s, st):
    """The final stage vectorized over rows, its short reduction inside: the narrow partials
    are widened in vector code."""
    _rfactor(s, st)
    io, ii = st.split(st.op.axis[0], 8)
    st.reorder(io, st.op.reduce_axis[0], ii)
    st.vectorize(ii)


def _cache_write(s, st):
    caches = s.cache_write(st.origin_op.output(0), "local")
    io, ii = st.split(st.op.axis[0], 8)
    s[caches[0]].compute_at(st, io)


def _vectorize_rows(s, st):
    io, ii = st.split(st.op.axis[0], 8)
    st.reorder(io, st.op.reduce_axis[0], ii)
    st.vectorize(ii)


SCHEDULES = {"default": lambda s, st: None, "rfactor": _rfactor,
             "rfactor_2_chains": lambda s, st: _rfactor(s, st, chains=2),
             "rfactor_4_chains": lambda s, st: _rfactor(s, st, chains=4),
             "rfactor_at": _rfactor_at, "rfactor_vector_final": _rfactor_vector_final,
             "cache_write": _cache_write,
             "vectorize_rows": _vectorize_rows}


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("which", ["argmax", "argmin"])
def test_argmax_argmin_match_numpy(which, schedule, dtype):
    X = te.placeholder((37, 1001), name="X")
    idx, val = getattr(te, which)(X, axis=1, dtype=dtype)
    s = einloop.create_schedule([idx, val])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VectorizeWarning)
        SCHEDULES[schedule](s, s[idx])
    x = tied_data((37, 1001), seed=1)
    got_idx, got_val = run(s, [X], [idx, val], [x])
    ref_idx, ref_val = {"argmax": (np.argmax, np.max), "argmin": (np.argmin, np.min)}[which]
    assert got_idx.dtype == dtype
    np.testing.assert_array_equal(got_idx, ref_idx(x, 1))
    np.testing.assert_array_equal(got_val, ref_val(x, 1))


@pytest.mark.parametrize("cols", [7, 8, 9, 15, 16, 17, 33])
def test_reduce_extents_around_lane_multiples(cols):
    """Splits by 8 and 16 that leave partial slots empty (their identity must lose)."""
    X = te.placeholder((5, cols), name="X")
    idx, val = te.argmax(X, axis=1)
    x = tied_data((5, cols), seed=cols)
    for chains in (1, 2):
        s = einloop.create_schedule([idx, val])
        _rfactor(s, s[idx], chains=chains)
        got_idx, got_val = run(s, [X], [idx, val], [x])
        np.testing.assert_array_equal(got_idx, np.argmax(x, 1))
        np.testing.assert_array_equal(got_val, np.max(x, 1))


# what is narrowed, what is not --------------------------------------------------------------

def test_the_partials_are_int32_and_the_output_int64():
    X = te.placeholder((37, 1001), name="X")
    idx, val = te.argmax(X, axis=1)
    s = einloop.create_schedule([idx, val])
    _rfactor(s, s[idx])
    kinds = buffers_of(s, [X, idx, val])
    assert kinds == {"X.argmax.rf.v0": "int32", "X.argmax.rf.v1": "float32",
                     "X.argmax.v0": "int64", "X.argmax.v1": "float32"}


def test_a_cache_write_accumulator_is_int32_and_read_widened():
    X = te.placeholder((37, 101), name="X")
    idx, val = te.argmin(X, axis=1)
    s = einloop.create_schedule([idx, val])
    _cache_write(s, s[idx])
    kinds = buffers_of(s, [X, idx, val])
    assert kinds["X.argmin.local.v0"] == "int32" and kinds["X.argmin.v0"] == "int64"


def test_an_argmax_read_by_a_later_stage_is_narrowed_and_read_widened():
    """An argmax that is no argument of the kernel lives in a temp of its own: narrowed; the
    stage that reads it sees int64 indices."""
    X = te.placeholder((37, 101), name="X")
    idx, val = te.argmax(X, axis=1)
    out = te.compute((37,), lambda i: idx[i] * 3 + 1, name="out")
    s = einloop.create_schedule([out])
    assert buffers_of(s, [X, out])["X.argmax.v0"] == "int32"
    x = tied_data((37, 101), seed=2)
    (got,) = run(s, [X], [out], [x])
    np.testing.assert_array_equal(got, np.argmax(x, 1) * 3 + 1)


def test_a_float64_value_keeps_int64_indices():
    """Narrowing pays only where the value has 32-bit lanes (float64 has int64's)."""
    X = te.placeholder((37, 101), name="X", dtype="float64")
    idx, val = te.argmax(X, axis=1)
    s = einloop.create_schedule([idx, val])
    _rfactor(s, s[idx], lanes=4)
    assert buffers_of(s, [X, idx, val])["X.argmax.rf.v0"] == "int64"


def test_a_symbolic_extent_keeps_int64_indices():
    """An extent the compiler cannot bound might not fit in int32."""
    n = te.size_var("n")
    X = te.placeholder((3, n), name="X")
    idx, val = te.argmax(X, axis=1)
    s = einloop.create_schedule([idx, val])
    st = s[idx]
    ko, ki = st.split(st.op.reduce_axis[0], 8)
    s.rfactor(idx, ki, factor_axis=1)
    assert buffers_of(s, [X, idx, val])["X.argmax.rf.v0"] == "int64"
    f = einloop.build(s, [X, idx, val])
    x = tied_data((3, 45), seed=5)
    i, v = np.zeros(3, "int64"), np.zeros(3, "float32")
    f(x, i, v)
    np.testing.assert_array_equal(i, np.argmax(x, 1))


def _user_reducer(combine_index, identity_index):
    """A user's argmax (ties: the smaller index) whose index combine is *combine_index*."""
    def combine(x, y):
        take = (x[1] > y[1]) | ((x[1] == y[1]) & (x[0] < y[0]))
        return combine_index(take, x[0], y[0]), te.if_then_else(take, x[1], y[1])
    return te.comm_reducer(combine, lambda t0, t1: (te.const(identity_index, t0),
                                                    te.min_value(t1)), name="my_argmax")


def _user_argmax(reducer, rows=37, cols=101):
    X = te.placeholder((rows, cols), name="X")
    k = te.reduce_axis((0, cols), name="k")
    idx, val = te.compute((rows,), lambda i: reducer((k.var, X[i, k]), axis=k), name="am")
    s = einloop.create_schedule([idx, val])
    _rfactor(s, s[idx], chains=2)
    return s, X, idx, val


def test_a_user_reducer_that_only_picks_its_index_is_narrowed():
    pick = (lambda take, a, b: te.if_then_else(take, a, b))
    s, X, idx, val = _user_argmax(_user_reducer(pick, -1))
    assert buffers_of(s, [X, idx, val])["am.rf.v0"] == "int32"
    x = np.random.default_rng(3).integers(-4, 5, size=(37, 101)).astype("float32")
    got_idx, got_val = run(s, [X], [idx, val], [x])
    np.testing.assert_array_equal(got_idx, np.argmax(x, 1))
    np.testing.assert_array_equal(got_val, np.max(x, 1))


@pytest.mark.parametrize("combine_index, identity", [
    (lambda take, a, b: te.if_then_else(take, a, b) + 0 * a, -1),     # arithmetic on it
    (lambda take, a, b: te.if_then_else(take, a, b), 2 ** 40),       # an identity too large
    (lambda take, a, b: te.if_then_else(take & (a > 3), a, b), -1),   # a comparison to a constant
])
def test_a_user_reducer_that_computes_with_its_index_keeps_int64(combine_index, identity):
    s, X, idx, val = _user_argmax(_user_reducer(combine_index, identity))
    assert buffers_of(s, [X, idx, val])["am.rf.v0"] == "int64"


@pytest.mark.parametrize("first_wins", [True, False])
def test_an_identity_that_survives_is_widened_back(first_wins):
    """With where= a row can have no element: its index is the identity, int64's largest (or
    smallest for a last-index-wins argmax), kept as int32's in the partials."""
    X = te.placeholder((6, 45), name="X")
    k = te.reduce_axis((0, 45), name="k")
    if first_wins:
        reducer, want_empty = argmax_reducer, I64.max
    else:
        def combine(x, y):
            take = (x[1] > y[1]) | ((x[1] == y[1]) & (x[0] > y[0]))
            return te.if_then_else(take, x[0], y[0]), te.if_then_else(take, x[1], y[1])
        reducer = te.comm_reducer(combine, lambda t0, t1: (te.min_value(t0), te.min_value(t1)),
                                  name="last_argmax")
        want_empty = I64.min
    idx, val = te.compute((6,), lambda i: reducer((k.var, X[i, k]), axis=k, where=X[i, k] > 0),
                          name="pos")
    s = einloop.create_schedule([idx, val])
    _rfactor(s, s[idx], chains=2)
    assert buffers_of(s, [X, idx, val])["pos.rf.v0"] == "int32"
    x = np.random.default_rng(4).integers(-3, 3, size=(6, 45)).astype("float32")
    x[2] = -1.0                                  # no positive element
    got_idx, got_val = run(s, [X], [idx, val], [x])
    masked = np.where(x > 0, x, -np.inf)
    ref = np.argmax(masked, 1) if first_wins else 44 - np.argmax(masked[:, ::-1], 1)
    np.testing.assert_array_equal(got_idx, np.where(np.isinf(masked).all(1), want_empty, ref))
    np.testing.assert_array_equal(got_val, masked.max(1))


# the code --------------------------------------------------------------------------------------

def test_the_avx2_vector_loop_keeps_the_index_in_32_bit_lanes():
    """For AVX2 (on any host): the partial stage's loop compares and selects the index as
    8 x i32, like the float32 value, with no 64-bit index vectors to convert masks to."""
    X = te.placeholder((64, 1000), name="X")
    idx, val = te.argmax(X, axis=1)
    s = einloop.create_schedule([idx, val])
    _rfactor(s, s[idx])
    f = einloop.build(s, [X, idx, val], target=AVX2)
    functions = f.get_source("llvm").split("\ndefine ")
    (partials,) = [fn for fn in functions if "for.k.outer:" in fn]    # the parallel worker
    assert re.search(r"icmp slt <8 x i32>", partials), partials
    assert re.search(r"select <8 x i1> %[\w.]+, <8 x i32>", partials), partials
    assert not re.search(r"x i64>", partials), partials       # no 64-bit index vectors


def test_partials_of_partials_are_read_raw():
    """The auto-scheduler's parallel rfactor: chunks of the row, each reduced to 8 lanes; the
    chunks' stage reduces the lanes' int32 partials as they are (no widening between two
    narrow stages), and the result widens the chunks' ones."""
    X = te.placeholder((3, 4001), name="X")
    idx, val = te.argmax(X, axis=1)
    s = einloop.create_schedule([idx, val])
    st = s[idx]
    ko, ki = st.split(st.op.reduce_axis[0], 8)
    kp, _ = st.split(ko, nparts=4)
    chunks = s.rfactor(idx, kp, factor_axis=1)
    lane = [iv for iv in s[chunks[0]].leaf_iter_vars if iv.kind.value == "reduce"][-1]
    lanes = s[s.rfactor(chunks[0], lane, factor_axis=2)[0]]
    lanes.vectorize(lanes.op.axis[2])
    lanes.parallel(lanes.op.axis[1])
    kinds = buffers_of(s, [X, idx, val])
    assert (kinds["X.argmax.rf.rf.v0"], kinds["X.argmax.rf.v0"], kinds["X.argmax.v0"]) == \
        ("int32", "int32", "int64")
    body = einloop.lower(s, [X, idx, val]).body
    (middle,) = [st.value for st in walk_stmt(body) if isinstance(st, S.LetStmt)
                 and st.var.name == "X.argmax.rf.v0.in"]
    assert middle.dtype == "int32" and type(middle).__name__ == "Load", middle
    x = tied_data((3, 4001), seed=6)
    got_idx, got_val = run(s, [X], [idx, val], [x])
    np.testing.assert_array_equal(got_idx, np.argmax(x, 1))
    np.testing.assert_array_equal(got_val, np.max(x, 1))


@pytest.mark.parametrize("dtype", ["int32", "int8"])
def test_integer_values_with_narrow_partials(dtype):
    """Integer values (a row of the type's minimum ties with the value identity: index 0)."""
    X = te.placeholder((9, 203), name="X", dtype=dtype)
    idx, val = te.argmax(X, axis=1)
    s = einloop.create_schedule([idx, val])
    _rfactor(s, s[idx], chains=2)
    assert buffers_of(s, [X, idx, val])["X.argmax.rf.v0"] == "int32"
    x = np.random.default_rng(7).integers(-3, 3, size=(9, 203)).astype(dtype)
    x[0, :] = np.iinfo(dtype).min
    got_idx, got_val = run(s, [X], [idx, val], [x])
    np.testing.assert_array_equal(got_idx, np.argmax(x, 1))
    np.testing.assert_array_equal(got_val, np.max(x, 1))
