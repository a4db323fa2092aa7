"""Error suite for schedules and lowering (Halide's test/error, for einloop.schedule).

One misuse per test.  Each asserts the specific einloop error class, a distinctive part of the
message (what is wrong), and that the message names where (stage / axis / tensor).  Misuses that
are only detectable once the whole schedule is known are raised by ``lower()``; such tests call
``lower`` inside the ``pytest.raises`` block.  Tests named ``test_accepts_*`` check that a
near-miss of a misuse is *not* rejected.  Misuses einloop does not catch yet are
``xfail(strict=True)``: the test states the wanted behaviour.
"""
import re

import pytest

from einloop import te, create_schedule, lower
from einloop.errors import ScheduleError, BuildError
from einloop.schedule import steps as S


def mentions(excinfo, *names):
    """The error message names every one of *names* (as a whole word)."""
    msg = str(excinfo.value)
    for n in names:
        assert re.search(rf"(?<!\w){re.escape(n)}(?!\w)", msg), f"message does not name {n!r}: {msg}"


def matmul(n=16):
    """C[i, j] = sum_k A[i, k] * B[k, j]."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def chain():
    """P -> F -> G (elementwise, 2-D)."""
    P = te.placeholder((16, 16), name="P")
    F = te.compute((16, 16), lambda i, j: P[i, j] * 2.0, name="F")
    G = te.compute((16, 16), lambda i, j: F[i, j] + 1.0, name="G")
    return P, F, G, create_schedule(G)


def chain3():
    """P -> E1 -> E2 -> E3 (elementwise, 1-D)."""
    P = te.placeholder((16,), name="P")
    E1 = te.compute((16,), lambda i: P[i] * 2.0, name="E1")
    E2 = te.compute((16,), lambda i: E1[i] + 1.0, name="E2")
    E3 = te.compute((16,), lambda i: E2[i] + 1.0, name="E3")
    return P, E1, E2, E3, create_schedule(E3)


def mm_sched():
    A, B, C = matmul()
    s = create_schedule(C)
    return s, C, s[C].op.axis[0], s[C].op.axis[1], s[C].op.reduce_axis[0]


# split -------------------------------------------------------------------------------------------

def test_split_with_both_factor_and_nparts():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"split on stage C, axis i: give exactly one of "
                                            r"factor= or nparts="):
        s[C].split(i, factor=4, nparts=4)


def test_split_with_neither_factor_nor_nparts():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"split on stage C, axis j: give exactly one of"):
        s[C].split(j)


def test_split_zero_factor():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"split on stage C, axis i: factor must be a positive "
                                            r"integer, got 0"):
        s[C].split(i, factor=0)


def test_split_negative_nparts():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"split on stage C, axis i: nparts must be a positive "
                                            r"integer, got -2"):
        s[C].split(i, nparts=-2)


def test_split_float_factor():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"factor must be a positive integer, got 2\.0"):
        s[C].split(i, factor=2.0)


def test_split_bool_factor():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"factor must be a positive integer, got True"):
        s[C].split(i, factor=True)


def test_split_an_axis_already_split():
    s, C, i, j, k = mm_sched()
    s[C].split(i, factor=4)
    with pytest.raises(ScheduleError, match=r"split on stage C: axis i was already split or fused; "
                                            r"use its current loops: i\.outer, i\.inner, j, k"):
        s[C].split(i, factor=2)


def test_reorder_an_axis_already_split():
    s, C, i, j, k = mm_sched()
    s[C].split(i, factor=4)
    with pytest.raises(ScheduleError, match=r"reorder on stage C: axis i was already split or "
                                            r"fused"):
        s[C].reorder(j, i)


def test_split_a_name_instead_of_an_axis():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"split on stage C: expected an axis \(IterVar\), got "
                                            r"'j'"):
        s[C].split("j", factor=4)


def test_split_an_axis_of_another_stage():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = create_schedule(D)
    with pytest.raises(ScheduleError, match=r"split on stage D: axis i belongs to stage C"):
        s[D].split(s[C].op.axis[0], factor=4)


def test_vectorize_a_reduce_axis_of_another_stage():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = create_schedule(D)
    with pytest.raises(ScheduleError, match=r"vectorize on stage D: axis k belongs to stage C"):
        s[D].vectorize(s[C].op.reduce_axis[0])


def test_split_an_axis_of_no_stage():
    s, C, i, j, k = mm_sched()
    stray = te.reduce_axis((0, 4), name="stray")
    with pytest.raises(ScheduleError, match=r"axis stray is not an axis of this schedule") as e:
        s[C].split(stray, factor=2)
    mentions(e, "C")


# reorder / fuse ----------------------------------------------------------------------------------

def test_reorder_lists_an_axis_twice():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"reorder on stage C: an axis is listed twice in "
                                            r"\(j, i, j\)"):
        s[C].reorder(j, i, j)


def test_fuse_non_adjacent_loops():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"fuse on stage C: i and k are not adjacent loops.*"
                                            r"the loop order is i, j, k; reorder them first"):
        s[C].fuse(i, k)


def test_fuse_inner_before_outer():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"fuse on stage C: j and i are not adjacent loops "
                                            r"\(outer first\)"):
        s[C].fuse(j, i)


def test_fuse_data_and_reduce_axis():
    s, C, i, j, k = mm_sched()
    s[C].reorder(i, k, j)
    with pytest.raises(ScheduleError, match=r"fuse on stage C: cannot fuse the data axis and the "
                                            r"reduction axis \(i, k\)"):
        s[C].fuse(i, k)


def test_fuse_an_axis_with_itself():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"fuse on stage C: .*i.* (twice|itself)"):
        s[C].fuse(i, i)


def test_fuse_nothing():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"fuse on stage C: give at least one axis"):
        s[C].fuse()


# annotations -------------------------------------------------------------------------------------

def test_vectorize_a_reduction_axis():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"vectorize on stage C: k is a reduction axis; .*race "
                                            r"on the accumulator"):
        s[C].vectorize(k)


def test_parallel_a_reduction_axis():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"parallel on stage C: k is a reduction axis; .*race"):
        s[C].parallel(k)


def test_parallel_a_split_reduction_axis():
    s, C, i, j, k = mm_sched()
    ko, ki = s[C].split(k, factor=4)
    with pytest.raises(ScheduleError, match=r"parallel on stage C: k\.outer is a reduction axis"):
        s[C].parallel(ko)


def test_annotate_a_loop_with_two_kinds():
    s, C, i, j, k = mm_sched()
    s[C].parallel(i)
    with pytest.raises(ScheduleError, match=r"vectorize on stage C: i is already parallel; a loop "
                                            r"has one kind"):
        s[C].vectorize(i)


def test_split_a_vectorized_loop():
    P, F, G, s = chain()
    j = s[G].op.axis[1]
    s[G].vectorize(j)
    with pytest.raises(ScheduleError, match=r"stage G.*\bj\b.*vectorized"):
        s[G].split(j, factor=4)
        lower(s, [P, G])


def test_compute_at_a_vectorized_loop():
    P, F, G, s = chain()
    j = s[G].op.axis[1]
    s[G].vectorize(j)
    s[F].compute_at(s[G], j)
    with pytest.raises(ScheduleError, match=r"stage G: F is computed at the vectorized loop j; "
                                            r"compute it at an outer loop"):
        lower(s, [P, G])


def _unrolled(n):
    A = te.placeholder((n,), name="A")
    Out = te.compute((n,), lambda i: A[i] * 2.0, name="Out")
    s = create_schedule(Out)
    s[Out].unroll(s[Out].op.axis[0])
    return A, Out, s


def test_unroll_too_long_a_loop():
    A, Out, s = _unrolled(1024)
    with pytest.raises(ScheduleError, match=r"stage Out: unrolling loop i of extent 1024 would copy its body "
                                            r"1024 times \(limit 512\); split it"):
        lower(s, [A, Out])


def test_unroll_limit_message_names_the_stage():
    A, Out, s = _unrolled(1024)
    with pytest.raises(ScheduleError, match=r"stage Out: unrolling loop i of extent 1024") as e:
        lower(s, [A, Out])
    mentions(e, "Out")


# placement ---------------------------------------------------------------------------------------

def test_compute_inline_a_reduction():
    A, B, C = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = create_schedule(D)
    with pytest.raises(ScheduleError, match=r"compute_inline: stage C is a reduction; .*Use "
                                            r"compute_at instead"):
        s[C].compute_inline()


def test_compute_inline_an_output():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"compute_inline: stage G is an output of the schedule "
                                            r"and must be stored"):
        s[G].compute_inline()


def test_compute_inline_a_transformed_stage():
    P, F, G, s = chain()
    s[F].split(s[F].op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"compute_inline: stage F already has loop "
                                            r"transformations"):
        s[F].compute_inline()


def test_compute_inline_a_stage_that_hosts_another():
    P, E1, E2, E3, s = chain3()
    s[E1].compute_at(s[E2], s[E2].op.axis[0])
    with pytest.raises(ScheduleError, match=r"compute_inline: stage E1 is computed at a loop of "
                                            r"E2; move it first"):
        s[E2].compute_inline()


def test_compute_at_a_stage_that_does_not_use_it():
    # reversed: E1 does not read E2 (E2 reads E1)
    P, E1, E2, E3, s = chain3()
    with pytest.raises(ScheduleError, match=r"compute_at: stage E1 does not use E2; compute a stage "
                                            r"at a loop of a stage that reads it \(E3\)"):
        s[E2].compute_at(s[E1], s[E1].op.axis[0])


def test_compute_at_an_independent_stage():
    P = te.placeholder((16,), name="P")
    Q = te.placeholder((16,), name="Q")
    F1 = te.compute((16,), lambda i: P[i] * 2.0, name="F1")
    F2 = te.compute((16,), lambda i: Q[i] + 1.0, name="F2")
    G = te.compute((16,), lambda i: F1[i] + F2[i], name="G")
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"compute_at: stage F2 does not use F1.*\(G\)"):
        s[F1].compute_at(s[F2], s[F2].op.axis[0])


def test_compute_at_a_tensor_instead_of_a_stage():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"compute_at on stage F: the first argument must be a "
                                            r"stage \(s\[T\]\), got Tensor\(G"):
        s[F].compute_at(G, s[G].op.axis[0])


def test_compute_at_with_an_axis_of_another_stage():
    P, E1, E2, E3, s = chain3()
    with pytest.raises(ScheduleError, match=r"compute_at on stage E2: axis i belongs to stage E3"):
        s[E1].compute_at(s[E2], s[E3].op.axis[0])


def test_compute_at_one_of_two_consumers():
    # F is read by G1 and G2; computing it inside G2's loop leaves G1 (at the root) without it
    P = te.placeholder((16,), name="P")
    F = te.compute((16,), lambda i: P[i] * 2.0, name="F")
    G1 = te.compute((16,), lambda i: F[i] + 1.0, name="G1")
    G2 = te.compute((16,), lambda i: F[i] + G1[i], name="G2")
    s = create_schedule(G2)
    with pytest.raises(ScheduleError, match=r"stage F is computed at G2\.i, but its consumer G1 is "
                                            r"computed at the root, outside that loop"):
        s[F].compute_at(s[G2], s[G2].op.axis[0])
        lower(s, [P, G2])


def test_compute_at_an_indirect_consumer_past_a_root_stage():
    P, E1, E2, E3, s = chain3()
    with pytest.raises(ScheduleError, match=r"stage E1 is computed at E3\.i, but its consumer E2 is "
                                            r"computed at the root"):
        s[E1].compute_at(s[E3], s[E3].op.axis[0])
        lower(s, [P, E3])


def chain4_nested():
    """P -> E1 -> E2 -> E3 -> E4 (1-D), E4's loop split, E2 nested in E3 at E4's outer loop."""
    P = te.placeholder((16,), name="P")
    E1 = te.compute((16,), lambda i: P[i] * 2.0, name="E1")
    E2 = te.compute((16,), lambda i: E1[i] + 1.0, name="E2")
    E3 = te.compute((16,), lambda i: E2[i] + 1.0, name="E3")
    E4 = te.compute((16,), lambda i: E3[i] + 1.0, name="E4")
    s = create_schedule(E4)
    io, ii = s[E4].split(s[E4].op.axis[0], factor=4)
    s[E3].compute_at(s[E4], io)
    s[E2].compute_at(s[E3], s[E3].op.axis[0])
    return P, E1, E4, (io, ii), s


def test_compute_at_inside_the_loop_of_a_nested_consumer():
    P, E1, E4, (io, ii), s = chain4_nested()
    s[E1].compute_at(s[E4], ii)
    with pytest.raises(ScheduleError, match=r"stage E1 is computed at E4\.i\.inner, but its "
                                            r"consumer E2 is computed at E3\.i \(E3 at "
                                            r"E4\.i\.outer\), outside that loop"):
        lower(s, [P, E4])


def test_accepts_compute_at_enclosing_a_nested_consumer():
    P, E1, E4, (io, ii), s = chain4_nested()
    s[E1].compute_at(s[E4], io)
    lower(s, [P, E4])


def test_compute_at_an_output():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"compute_at: stage G is an output of the schedule; an "
                                            r"output must be computed at the root"):
        s[G].compute_at(s[F], s[F].op.axis[0])


def test_compute_at_an_inlined_stage():
    P, E1, E2, E3, s = chain3()
    s[E2].compute_inline()
    with pytest.raises(ScheduleError, match=r"compute_at: stage E2 is inlined and has no loops"):
        s[E1].compute_at(s[E2], s[E2].op.axis[0])


def test_split_an_inlined_stage():
    P, F, G, s = chain()
    s[F].compute_inline()
    with pytest.raises(ScheduleError, match=r"split: stage F is inlined and has no loops of its "
                                            r"own; call compute_root\(\)"):
        s[F].split(s[F].op.axis[0], factor=4)


def test_split_the_loop_another_stage_is_computed_at():
    P, F, G, s = chain()
    i = s[G].op.axis[0]
    s[F].compute_at(s[G], i)
    with pytest.raises(ScheduleError, match=r"\bF\b.*computed at.*\bi\b"):
        s[G].split(i, factor=4)
        lower(s, [P, G])


def test_fuse_the_loop_another_stage_is_computed_at():
    P, F, G, s = chain()
    i, j = s[G].op.axis
    s[F].compute_at(s[G], j)
    with pytest.raises(ScheduleError, match=r"\bF\b.*computed at.*\bj\b"):
        s[G].fuse(i, j)
        lower(s, [P, G])


def test_accepts_compute_at_through_an_inlined_consumer():
    P, E1, E2, E3, s = chain3()
    s[E2].compute_inline()
    s[E1].compute_at(s[E3], s[E3].op.axis[0])
    lower(s, [P, E3])


# cache_read / cache_write ------------------------------------------------------------------------

def test_cache_write_after_split():
    A, B, C = matmul()
    s = create_schedule(C)
    s[C].split(s[C].op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"cache_write on C must come before its other "
                                            r"primitives \(split, reorder, compute_at"):
        s.cache_write(C, "local")


def test_cache_write_of_a_placeholder():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"cache_write: P is a placeholder; only computes can be "
                                            r"cached"):
        s.cache_write(P, "local")


def test_cache_read_with_a_stage_that_does_not_read_it():
    P = te.placeholder((16,), name="P")
    Q = te.placeholder((16,), name="Q")
    F = te.compute((16,), lambda i: P[i] * 2.0, name="F")
    G = te.compute((16,), lambda i: F[i] + Q[i], name="G")
    s = create_schedule(G)
    with pytest.raises(ScheduleError, match=r"cache_read: stage F does not read Q"):
        s.cache_read(Q, "local", [F])


def test_cache_read_without_readers():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"cache_read of P: give the reader stages"):
        s.cache_read(P, "local", [])


# rfactor -----------------------------------------------------------------------------------------

def test_rfactor_a_data_axis():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"rfactor of C: i is a data axis; rfactor a reduction "
                                            r"loop \(k\)") as e:
        s.rfactor(C, i)
    mentions(e, "C", "i")
    assert not s.steps and len(s.stages) == 3


def test_rfactor_an_elementwise_stage():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"rfactor of F: F is not a reduction"):
        s.rfactor(F, s[F].op.axis[0])


def test_rfactor_a_placeholder():
    s, C, i, j, k = mm_sched()
    A = C.op.input_tensors[0]
    with pytest.raises(ScheduleError, match=r"rfactor of A: A is a placeholder"):
        s.rfactor(A, k)


def test_rfactor_after_cache_write_names_the_cache_stage():
    s, C, i, j, k = mm_sched()
    s.cache_write(C, "local")
    with pytest.raises(ScheduleError, match=r"C is not a reduction.*rfactor the cache stage "
                                            r"C\.local"):
        s.rfactor(C, k)


@pytest.mark.parametrize("factor_axis", [3, -1, 1.0, True])
def test_rfactor_factor_axis_out_of_range(factor_axis):
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"rfactor of C: factor_axis is where the factored axis "
                                            r"goes among the 2 data axes of C, an integer in "
                                            r"0\.\.2"):
        s.rfactor(C, k, factor_axis)


def test_rfactor_an_axis_already_split():
    s, C, i, j, k = mm_sched()
    s[C].split(k, factor=4)
    with pytest.raises(ScheduleError, match=r"rfactor on stage C: axis k was already split or "
                                            r"fused; use its current loops"):
        s.rfactor(C, k)


def test_rfactor_an_axis_of_another_stage():
    s, C, i, j, k = mm_sched()
    r = te.reduce_axis((0, 16), name="r")
    D = te.compute((16,), lambda x: te.sum(C[x, r], axis=r), name="D")
    s2 = create_schedule(D)
    with pytest.raises(ScheduleError, match=r"rfactor on stage D: axis k belongs to stage C"):
        s2.rfactor(D, s2[C].op.reduce_axis[0])


def test_rfactor_after_splitting_a_data_axis():
    s, C, i, j, k = mm_sched()
    s[C].split(i, factor=4)
    with pytest.raises(ScheduleError, match=r"rfactor of C: its data axis i was already split or "
                                            r"fused; only split, fuse and reorder of its "
                                            r"reduction loops may come before rfactor"):
        s.rfactor(C, k)


def test_rfactor_after_an_annotation():
    s, C, i, j, k = mm_sched()
    ko, ki = s[C].split(k, factor=4)
    s[C].unroll(ki)
    with pytest.raises(ScheduleError, match=r"rfactor of C: loop k\.inner is already unrolled; "
                                            r"only split, fuse and reorder"):
        s.rfactor(C, ko)


def test_rfactor_after_moving_a_data_loop():
    s, C, i, j, k = mm_sched()
    s[C].reorder(k, i)
    with pytest.raises(ScheduleError, match=r"rfactor of C: the loops were reordered to k, j, i, "
                                            r"moving a data loop"):
        s.rfactor(C, k)


def test_rfactor_of_a_stage_another_is_computed_at():
    A = te.placeholder((8, 16), name="A")
    B = te.compute((8, 16), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((8,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = create_schedule(C)
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.raises(ScheduleError, match=r"rfactor of C: stage B is computed at loop i of C; "
                                            r"call rfactor before compute_at, then compute B at a "
                                            r"loop of C\.rf"):
        s.rfactor(C, k)


def test_rfactor_loaded_with_a_negative_factor_axis():
    with pytest.raises(ScheduleError, match=r"schedule step rfactor on stage C: argument "
                                            r"'factor_axis' must be a non-negative integer, got -1"):
        S.steps_from_json([{"kind": "rfactor", "stage": "C",
                            "args": {"axis": "k", "factor_axis": -1}}])


def test_rfactor_replayed_on_a_missing_axis():
    s, C, i, j, k = mm_sched()
    with pytest.raises(ScheduleError, match=r"stage C has no axis named 'k\.inner'"):
        s.apply_steps([{"kind": "rfactor", "stage": "C", "args": {"axis": "k.inner"}}])


def test_accepts_rfactor_after_reduction_splits_reorders_and_compute_at():
    A = te.placeholder((8, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    s = create_schedule(C)
    ko, ki = s[B].split(k, factor=4)
    kio, kii = s[B].split(ki, nparts=2)
    s[B].reorder(kii, ko, kio)
    s[B].compute_at(s[C], s[C].op.axis[0])
    BF = s.rfactor(B, kio)
    assert [iv.name for iv in s[BF].op.reduce_axis] == ["k.inner.inner", "k.outer"]
    lower(s, [A, C])


# pack --------------------------------------------------------------------------------------------

def test_pack_a_tensor_not_in_the_schedule():
    P, F, G, s = chain()
    X = te.placeholder((3,), name="X")
    with pytest.raises(ScheduleError, match=r"X is not part of this schedule"):
        s.pack(X, 0, 2)


@pytest.mark.parametrize("axis", [2, -1, 1.0, True])
def test_pack_an_axis_out_of_range(axis):
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"pack of P: axis must be a dimension index in 0\.\.1 "
                                            r"\(P has shape \(16, 16\)\)"):
        s.pack(P, axis, 4)
    assert not s.steps


@pytest.mark.parametrize("factor", [0, -2, 2.5, True])
def test_pack_by_a_factor_below_one(factor):
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"pack of P: factor must be a positive integer"):
        s.pack(P, 1, factor)


def test_pack_an_output():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"pack of G: G is an output of the schedule; its "
                                            r"layout is the caller's"):
        s.pack(G, 0, 4)


def test_pack_a_stage_computed_at_a_loop():
    P, F, G, s = chain()
    s[F].compute_at(s[G], s[G].op.axis[0])
    with pytest.raises(ScheduleError, match=r"pack of F: F is computed at a loop of G.*pack F "
                                            r"before calling compute_at"):
        s.pack(F, 1, 4)


def test_replay_a_pack_step_with_a_negative_axis():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"schedule step pack on stage P: argument 'axis' must "
                                            r"be a non-negative integer, got -1"):
        s.apply_steps([{"kind": "pack", "stage": "P", "args": {"axis": -1, "factor": 4}}])


def test_accepts_pack_by_a_factor_larger_than_the_extent():
    P, F, G, s = chain()
    PP = s.pack(P, 1, 100)                       # clamped to the extent, as split clamps
    assert PP.shape == (1, 16, 16)
    lower(s, [P, G])


# placeholders and foreign tensors ----------------------------------------------------------------

@pytest.mark.parametrize("primitive", ["split", "fuse", "reorder", "vectorize", "parallel",
                                       "unroll", "compute_at", "compute_inline"])
def test_primitive_on_a_placeholder_stage(primitive):
    P, F, G, s = chain()
    i = s[G].op.axis[0]
    call = {
        "split": lambda st: st.split(i, factor=2),
        "fuse": lambda st: st.fuse(i, s[G].op.axis[1]),
        "reorder": lambda st: st.reorder(i),
        "vectorize": lambda st: st.vectorize(i),
        "parallel": lambda st: st.parallel(i),
        "unroll": lambda st: st.unroll(i),
        "compute_at": lambda st: st.compute_at(s[G], i),
        "compute_inline": lambda st: st.compute_inline(),
    }[primitive]
    with pytest.raises(ScheduleError, match=rf"{primitive}: stage P is a placeholder \(an input\); "
                                            r"only compute stages have loops"):
        call(s[P])


def test_compute_root_on_a_placeholder_stage():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"compute_root: stage P is a placeholder"):
        s[P].compute_root()


def test_stage_of_a_tensor_not_in_the_schedule():
    P, F, G, s = chain()
    X = te.placeholder((3,), name="X")
    with pytest.raises(ScheduleError, match=r"X is not part of this schedule \(its stages are P, F, "
                                            r"G\)"):
        s[X]


def test_stage_looked_up_by_name():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"stage_named|expects a tensor|takes a tensor"):
        s["G"]


def test_create_schedule_of_nothing():
    with pytest.raises(ScheduleError, match=r"create_schedule: expected a tensor, an operation "
                                            r"\(C.op\) or a list of them, got \[\]"):
        create_schedule([])


@pytest.mark.parametrize("bad", [3, None, "G", [1.5]])
def test_create_schedule_of_a_non_tensor(bad):
    with pytest.raises(ScheduleError, match=r"create_schedule: expected a tensor"):
        create_schedule(bad)


def test_accepts_an_operation_as_in_tvm():
    P, F, G, _ = chain()
    by_op, by_tensor = create_schedule(G.op), create_schedule(G)
    assert [st.name for st in by_op.stages] == [st.name for st in by_tensor.stages]
    assert [st.name for st in create_schedule([G.op]).stages] == [st.name for st in by_op.stages]


# lower() arguments -------------------------------------------------------------------------------

def test_lower_without_the_output_in_args():
    P, F, G, s = chain()
    with pytest.raises(BuildError, match=r"the output G is not in args; add it"):
        lower(s, [P])


def test_lower_without_an_input_in_args():
    P, F, G, s = chain()
    with pytest.raises(BuildError, match=r"the input P is read by the computation but is not in "
                                         r"args; add it"):
        lower(s, [G])


def test_lower_with_a_tensor_listed_twice():
    P, F, G, s = chain()
    with pytest.raises(BuildError, match=r"args list P twice; each tensor is one argument"):
        lower(s, [P, G, P])


def test_lower_with_a_non_tensor_arg():
    P, F, G, s = chain()
    with pytest.raises(BuildError, match=r"args must be the tensors of the kernel's signature, got "
                                         r"'G'"):
        lower(s, [P, "G"])


def test_lower_with_a_tensor_of_another_schedule():
    P, F, G, s = chain()
    X = te.placeholder((3,), name="X")
    with pytest.raises(ScheduleError, match=r"X is not part of this schedule"):
        lower(s, [P, G, X])


def test_lower_with_args_not_a_list():
    P, F, G, s = chain()
    with pytest.raises(BuildError, match=r"args must be"):
        lower(s, None)


def test_lower_with_an_inlined_stage_in_args():
    P, E1, E2, E3, s = chain3()
    s[E2].compute_inline()
    with pytest.raises(BuildError, match=r"\bE2\b.*compute_inline'd"):
        lower(s, [P, E2, E3])


def test_accepts_two_distinct_inputs_with_the_same_name():
    X1 = te.placeholder((4,), name="X")
    X2 = te.placeholder((4,), name="X")
    R = te.compute((4,), lambda i: X1[i] + X2[i], name="R")
    s = create_schedule(R)
    lower(s, [X1, X2, R])


# replaying steps ---------------------------------------------------------------------------------

def _split_step(stage="G", axis="i", factor=4):
    return {"kind": "split", "stage": stage, "args": {"axis": axis, "factor": factor}}


def test_replay_a_step_naming_an_unknown_axis():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"stage G has no axis named 'zz'; its axes are i, j"):
        s.apply_steps([_split_step(axis="zz")])


def test_replay_a_step_naming_an_unknown_stage():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"this schedule has no stage named 'ZZ'; stages: P, F, "
                                            r"G"):
        s.apply_steps([_split_step(stage="ZZ")])


def test_replay_a_step_of_unknown_kind():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"unknown schedule step kind 'bind'"):
        s.apply_steps([{"kind": "bind", "stage": "G", "args": {}}])


def test_replay_a_step_missing_an_argument():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"lacks the argument 'axis'") as e:
        s.apply_steps([{"kind": "split", "stage": "G", "args": {"factor": 4}}])
    mentions(e, "split", "G")


def test_replay_a_split_of_an_axis_already_split():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"split on stage G: axis i was already split"):
        s.apply_steps([_split_step(), _split_step(factor=2)])


def test_replay_a_malformed_step():
    P, F, G, s = chain()
    with pytest.raises(ScheduleError, match=r"kind"):
        s.apply_steps([{"stage": "G", "args": {}}])
