"""``s[T].prefetch``: the region each iteration prefetches, results unchanged, the code LLVM
emits, and every misuse a ScheduleError.  The auto-scheduler's use of it is tested in
``tests/autotune/auto/test_rule_prefetch.py``."""
import re

import numpy as np
import pytest

import ops
from einloop import build, create_schedule, lower, te
from einloop.errors import ScheduleError
from einloop.schedule.passes.prefetch import PREFETCH_MAX_BYTES

#: an explicit x86-64 target, so the assembly checked is the same on any host
TARGET = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell"
RNG = np.random.default_rng(3)


def row_softmax(M, N):
    """Softmax over rows (tests/ops.py), every stage of a row computed at the parallel row
    loop."""
    (X,), (Out,), _ = ops.softmax(M, N)
    s = create_schedule(Out)
    i = s[Out].op.axis[0]
    s[Out].parallel(i)
    for name in ("Mx", "E", "S"):
        s.stage_named(name).compute_at(s[Out], i)
    return s, X, Out, i


def softmax_ref(x):
    return ops.softmax(*x.shape)[2](x)[0]


def prefetch_lines(text):
    return [line.strip() for line in text.splitlines() if "prefetch " in line]


@pytest.mark.parametrize("M, N, offset", [(37, 100, 1), (8, 1024, 2), (5, 17, 4)])
def test_next_rows_are_prefetched_and_the_result_is_the_same(M, N, offset):
    s, X, Out, i = row_softmax(M, N)
    s[Out].prefetch(X, i, offset=offset)
    text = str(lower(s, [X, Out]))
    assert prefetch_lines(text) == [f"prefetch X[i * {N} + {N * offset}:+{N}]"]
    assert f"if i + {offset} < {M}:" in text           # never past the last row's iteration
    f = build(s, [X, Out], target=TARGET)
    x, out = RNG.standard_normal((M, N)).astype("float32"), np.zeros((M, N), "float32")
    f(x, out)
    np.testing.assert_allclose(out, softmax_ref(x), rtol=1e-5, atol=1e-6)
    lines = -(-N * 4 // 64) + 1                        # a row may start mid-line
    assert f.get_source("asm").count("prefetcht0") == lines


def test_reads_of_several_stages_are_united_when_they_lie_a_constant_apart():
    """A 3-point stencil tiled by 16: each tile reads A[16 t .. 16 t + 17], through its own
    reads and those of a stage computed inside the tile."""
    n = 160
    A = te.placeholder((n + 2,), name="A")
    P = te.compute((n + 1,), lambda i: A[i] + A[i + 1], name="P")
    B = te.compute((n,), lambda i: P[i] * 2.0 + A[i + 2], name="B")
    s = create_schedule(B)
    to, ti = s[B].split(s[B].op.axis[0], factor=16)
    s[B].parallel(to)
    s[P].compute_at(s[B], to)
    s[B].prefetch(A, to)
    text = str(lower(s, [A, B]))
    assert prefetch_lines(text) == ["prefetch A[i.outer * 16 + 16:+18]"]
    a, out = RNG.standard_normal(n + 2).astype("float32"), np.zeros(n, "float32")
    build(s, [A, B], target=TARGET)(a, out)
    np.testing.assert_allclose(out, (a[:-2] + a[1:-1]) * 2 + a[2:], rtol=1e-6)


def test_a_symbolic_loop_is_guarded_by_its_extent():
    n = te.size_var("n")
    A = te.placeholder((n, 64), name="A")
    B = te.compute((n, 64), lambda i, j: A[i, j] * 3.0, name="B")
    s = create_schedule(B)
    i = s[B].op.axis[0]
    s[B].prefetch(A, i)
    text = str(lower(s, [A, B]))
    # the loop's steady part and its tail each prefetch their next row
    lines = prefetch_lines(text)
    assert lines and all(re.fullmatch(r"prefetch A\[(.+) \* 64 \+ 64:\+64\]", x) for x in lines)
    assert re.search(r"if .* \+ 1 < n:", text)
    f = build(s, [A, B], target=TARGET)
    for rows in (1, 9):
        a, out = RNG.standard_normal((rows, 64)).astype("float32"), np.zeros((rows, 64), "float32")
        f(a, out)
        np.testing.assert_array_equal(out, a * 3)


def test_a_region_that_is_no_range_too_large_or_loop_invariant_is_not_prefetched():
    """Nothing is prefetched for a gather (indices read from data), for an iteration that
    reads more than PREFETCH_MAX_BYTES, nor for what every iteration reads alike; the results
    stay the same."""
    rows = PREFETCH_MAX_BYTES // 4 // 64 + 1              # one row more than fits
    A = te.placeholder((8, rows * 64), name="A")
    B = te.compute((8, rows * 64), lambda i, j: A[i, j] + 1.0, name="B")
    s = create_schedule(B)
    i = s[B].op.axis[0]
    s[B].prefetch(A, i)
    assert prefetch_lines(str(lower(s, [A, B]))) == []
    Idx = te.placeholder((32,), "int32", name="Idx")
    V = te.placeholder((1000,), name="V")
    G = te.compute((32,), lambda t: V[Idx[t]] * 2.0, name="G")
    s = create_schedule(G)
    to, _ = s[G].split(s[G].op.axis[0], factor=8)
    s[G].prefetch(V, to)
    assert prefetch_lines(str(lower(s, [Idx, V, G]))) == []
    bias = te.placeholder((64,), name="bias")
    A = te.placeholder((8, 64), name="A")
    B = te.compute((8, 64), lambda i, j: A[i, j] + bias[j], name="B")
    s_bias = create_schedule(B)
    s_bias[B].prefetch(bias, s_bias[B].op.axis[0])        # the same 64 floats in every row
    assert prefetch_lines(str(lower(s_bias, [A, bias, B]))) == []
    idx, v = RNG.integers(0, 1000, 32).astype("int32"), RNG.standard_normal(1000).astype("float32")
    out = np.zeros(32, "float32")
    build(s, [Idx, V, G], target=TARGET)(idx, v, out)
    np.testing.assert_array_equal(out, v[idx] * 2)


def test_a_stage_computed_inside_another_is_not_prefetched():
    """Its buffer lives only inside the loop it is computed at (found by the fuzzer: codegen
    met the buffer before its allocation)."""
    s, X, Out, i = row_softmax(8, 64)
    E = s.stage_named("E")
    s[Out].prefetch(E.origin_op.output(), i)
    with pytest.raises(ScheduleError, match=r"prefetch on stage Out: E is computed at a loop of "
                                            r"stage Out, into a buffer that lives only there"):
        lower(s, [X, Out])


def test_prefetch_replays_and_prints():
    s, X, Out, i = row_softmax(16, 64)
    s[Out].prefetch(X, i, offset=3)
    s[Out].prefetch(X, i, offset=2)                        # the same loop and tensor: replaced
    assert "prefetch(X, i, offset=2)" in str(s)
    from einloop.schedule import replay as R
    s2, X2, Out2, _ = row_softmax(16, 64)
    replayed = R.replay(s.steps, [Out2])
    assert prefetch_lines(str(lower(replayed, [X2, Out2]))) == ["prefetch X[i * 64 + 128:+64]"]


def _misuse(case):
    s, X, Out, i = row_softmax(16, 64)
    if case == "offset 0":
        s[Out].prefetch(X, i, offset=0)
    elif case == "offset bool":
        s[Out].prefetch(X, i, offset=True)
    elif case == "offset float":
        s[Out].prefetch(X, i, offset=1.5)
    elif case == "its own output":
        s[Out].prefetch(Out, i)
    elif case == "a foreign tensor":
        s[Out].prefetch(te.placeholder((16, 64), name="Y"), i)
    elif case == "a loop by name":
        s[Out].prefetch(X, "i")
    elif case == "a loop of another stage":
        s[Out].prefetch(X, s.stage_named("Mx").op.axis[0])
    elif case == "a vectorized loop":
        j = s[Out].op.axis[1]
        s[Out].vectorize(j)
        s[Out].prefetch(X, j)
    elif case == "split after":
        s = create_schedule(Out)
        s[Out].prefetch(X, i)
        s[Out].split(i, factor=4)
    elif case == "an input of the placeholder":
        s[X].prefetch(X, i)


@pytest.mark.parametrize("case, message", [
    ("offset 0", r"offset must be a positive number of iterations, got 0"),
    ("offset bool", r"offset must be a positive number of iterations, got True"),
    ("offset float", r"offset must be a positive number of iterations, got 1.5"),
    ("its own output", r"a stage prefetches what it reads, not what it writes"),
    ("a foreign tensor", r"Y is not part of this schedule"),
    ("a loop by name", r"prefetch on stage Out: expected an axis \(IterVar\), got 'i'"),
    ("a loop of another stage", r"prefetch on stage Out: axis i belongs to stage Mx"),
    ("a vectorized loop", r"loop j is vectorized; prefetch at a loop outside the vector loop"),
    ("split after", r"split on stage Out: loop i prefetches; split first"),
    ("an input of the placeholder", r"prefetch: stage X is a placeholder"),
])
def test_misuse_is_a_schedule_error(case, message):
    with pytest.raises(ScheduleError, match=message):
        _misuse(case)


def test_a_tensor_the_loop_does_not_read_is_an_error_when_lowered():
    """A tensor read only by a stage computed at the root is not read inside the loop; an
    inlined stage is named as such, and its reads are the loop's own."""
    A = te.placeholder((16, 64), name="A")
    T = te.compute((16, 64), lambda i, j: A[i, j] * 2.0, name="T")
    B = te.compute((16, 64), lambda i, j: T[i, j] + 1.0, name="B")
    s = create_schedule(B)
    i = s[B].op.axis[0]
    s[B].prefetch(A, i)                    # A is read by T, computed at the root
    with pytest.raises(ScheduleError, match=r"no iteration of loop i reads A; prefetch a tensor "
                                            r"that the loop's body reads"):
        lower(s, [A, B])
    s = create_schedule(B)
    s[T].compute_inline()
    s[B].prefetch(T, s[B].op.axis[0])
    with pytest.raises(ScheduleError, match=r"reads T \(it is inlined\)"):
        lower(s, [A, B])
    s = create_schedule(B)                 # inlined: B's loop reads A itself
    s[T].compute_inline()
    s[B].prefetch(A, s[B].op.axis[0])
    assert prefetch_lines(str(lower(s, [A, B]))) == ["prefetch A[i * 64 + 64:+64]"]


def test_a_long_range_is_prefetched_line_by_line():
    """A range of more lines than are written out becomes a loop of prefetches, one per line
    (LLVM may unroll it again)."""
    from einloop.codegen.emit import PREFETCH_UNROLL_LINES
    n = (PREFETCH_UNROLL_LINES + 8) * 16                  # floats: more lines than unrolled
    A = te.placeholder((4, n), name="A")
    B = te.compute((4, n), lambda i, j: A[i, j] - 1.0, name="B")
    s = create_schedule(B)
    s[B].prefetch(A, s[B].op.axis[0])
    assert "for prefetch" not in str(lower(s, [A, B]))          # a codegen loop, not an IR one
    f = build(s, [A, B], target=TARGET)
    assert "prefetch" in f.get_source("llvm")
    assert len(re.findall(r"prefetcht0", f.get_source("asm"))) in (1, n * 4 // 64 + 1)
    a, out = RNG.standard_normal((4, n)).astype("float32"), np.zeros((4, n), "float32")
    f(a, out)
    np.testing.assert_array_equal(out, a - 1)


def test_a_prefetch_whose_reads_simplify_away_still_builds():
    """A reduction whose where= is False reads nothing in the end, but its prefetch stays in a
    parallel loop's body: the outlined body must still receive the buffer (found by the
    fuzzer, seed 36: codegen met a buffer the parallel loop did not capture)."""
    A = te.placeholder((1, 1, 1), "float64", name="A")
    k = te.reduce_axis((0, 1), name="k")
    T = te.compute((5, 1, 3), lambda i0, i1, i2: te.max(A[i2, 0, 0], axis=k,
                                                          where=te.const(False, "bool")),
                   name="T")
    s = create_schedule([T])
    TL = s.cache_write(T, "local")
    i0, i1, i2 = s[TL].op.axis
    outer, _ = s[TL].split(i0, factor=4)
    s[TL].parallel(outer)
    s[TL].prefetch(A, i2)
    assert prefetch_lines(str(lower(s, [A, T])))
    out = np.zeros((5, 1, 3))
    build(s, [A, T], target=TARGET)(np.array([[[0.5]]]), out)
    np.testing.assert_array_equal(out, np.full((5, 1, 3), -np.inf))
