"""Misuses of te.scan, te.cumsum and te.cumprod, and of a scan's schedule: one test each,
with the error class and the message it must carry."""
import pytest

from einloop import te, create_schedule, lower
from einloop.errors import ScheduleError, TEError

T, M = 9, 5
X = te.placeholder((T, M), name="X")


def parts():
    """The init, update and state of a cumulative sum of X down its rows."""
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + X[t, i], name="upd")
    return init, upd, S


def scan_of(body, init_rows=1):
    S = te.scan_state((T, M), name="S")
    init = te.compute((init_rows, M), lambda r, i: X[r, i], name="init")
    upd = te.compute((T, M), lambda t, i: body(S, t, i), name="upd")
    return te.scan(init, upd, S, name="Y")


def cumsum_schedule():
    Y = scan_of(lambda S, t, i: S[t - 1, i] + X[t, i])
    return create_schedule(Y), Y


# declarations ------------------------------------------------------------------------------------

def test_init_with_other_columns():
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M + 1), lambda _, i: 0.0, name="init")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i], name="upd")
    with pytest.raises(TEError, match=r"scan 'Y', state 0 \(S\): the init init has shape "
                                      r"\(1, 6\); it must be \(k, 5\)"):
        te.scan(init, upd, S, name="Y")


def test_update_of_another_shape():
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M), lambda _, i: 0.0, name="init")
    upd = te.compute((T, M + 2), lambda t, i: 1.0, name="upd")
    with pytest.raises(TEError, match=r"the update upd has shape \(9, 7\) but the state has "
                                      r"shape \(9, 5\)"):
        te.scan(init, upd, S, name="Y")


def test_init_longer_than_the_scan():
    S = te.scan_state((3, M), name="S")
    init = te.compute((4, M), lambda r, i: 0.0, name="init")
    upd = te.compute((3, M), lambda t, i: S[t - 1, i], name="upd")
    with pytest.raises(TEError, match=r"the init init has 4 rows along the scan axis; .*at "
                                      r"most the state's 3"):
        te.scan(init, upd, S, name="Y")


def test_dtypes_that_disagree():
    S = te.scan_state((T, M), name="S", dtype="float64")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + 1.0, name="upd")
    with pytest.raises(TEError, match=r"the init \(float32\), the update \(float64\) and the "
                                      r"state \(float64\) must have one dtype"):
        te.scan(init, upd, S, name="Y")


def test_lists_of_different_lengths():
    init, upd, S = parts()
    with pytest.raises(TEError, match=r"got 2 init\(s\), 1 update\(s\) and 1 state\(s\)"):
        te.scan([init, init], [upd], [S], name="Y")


def test_states_of_different_shapes():
    S0, S1 = te.scan_state((T, M), name="S0"), te.scan_state((T, 3), name="S1")
    i0 = te.compute((1, M), lambda _, i: 0.0, name="i0")
    i1 = te.compute((1, 3), lambda _, i: 0.0, name="i1")
    u0 = te.compute((T, M), lambda t, i: S0[t - 1, i], name="u0")
    u1 = te.compute((T, 3), lambda t, i: S1[t - 1, i], name="u1")
    with pytest.raises(TEError, match=r"state 1 \(S1\): its shape \(9, 3\) differs from state "
                                      r"0's \(9, 5\)"):
        te.scan([i0, i1], [u0, u1], [S0, S1], name="Y")


def test_computed_state():
    init, upd, _ = parts()
    with pytest.raises(TEError, match=r"the state must be a placeholder .* got the computed "
                                      r"tensor upd"):
        te.scan(init, upd, upd, name="Y")


def test_update_that_is_a_placeholder():
    init, _, S = parts()
    with pytest.raises(TEError, match=r"the update X must be a te.compute"):
        te.scan(init, X, S, name="Y")


def test_state_read_at_the_current_step():
    with pytest.raises(TEError, match=r"reads S\[t, i\], the state at step t, which is not "
                                      r"computed yet; a step reads only earlier steps"):
        scan_of(lambda S, t, i: S[t, i] + X[t, i])


def test_state_read_at_a_later_step():
    with pytest.raises(TEError, match=r"the state at step t \+ 1, which is not computed yet"):
        scan_of(lambda S, t, i: te.if_then_else(t < T - 1, S[t + 1, i], 0.0))


def test_state_read_further_back_than_the_init():
    with pytest.raises(TEError, match=r"reads S\[t - 2, i\], 2 steps back, but the init gives "
                                      r"only 1 row\(s\).*init of at least 2 rows"):
        scan_of(lambda S, t, i: S[t - 2, i] + X[t, i])


def test_state_read_at_a_step_that_is_not_t_minus_a_constant():
    with pytest.raises(TEError, match=r"reads S\[t // 2, i\]; a state is read at an earlier "
                                      r"step given as t - c with a constant c >= 1"):
        scan_of(lambda S, t, i: S[t // 2, i] + X[t, i])


def test_reduction_over_the_state():
    k = te.reduce_axis((0, M), name="k")
    with pytest.raises(TEError, match=r"the update upd reduces over the state S .*a reduction "
                                      r"over a state is not a step of a scan"):
        scan_of(lambda S, t, i: S[t - 1, i] + te.sum(S[t - 1, k], axis=k))


def test_placeholder_read_before_its_start_used_without_a_scan():
    """The update TVM's way (a te.placeholder read at t - 1) waits for te.scan; scheduled on its
    own, or read by another compute, it is the out-of-bounds read it looks like."""
    S = te.placeholder((T, M), name="S")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + X[t, i], name="upd")
    with pytest.raises(TEError, match=r"reads S\[t - 1, i\] out of bounds.*reaches down to -1"
                                      r".*pass it to te.scan as the state"):
        create_schedule(upd)
    with pytest.raises(TEError, match=r"compute 'upd' reads S\[t - 1, i\] out of bounds"):
        te.compute((T, M), lambda t, i: upd[t, i] * 2, name="twice")


def test_scan_refuses_a_read_before_the_start_of_another_placeholder():
    S, Z = te.placeholder((T, M), name="S"), te.placeholder((T, M), name="Z")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + Z[t - 1, i], name="upd")
    with pytest.raises(TEError, match=r"compute 'upd' reads Z\[t - 1, i\] out of bounds"):
        te.scan(init, upd, S)


def test_cumsum_axis_out_of_range():
    with pytest.raises(TEError, match=r"cumsum of X: axis must be an integer in -2\.\.1"):
        te.cumsum(X, axis=2)


def test_cumprod_of_something_else():
    with pytest.raises(TEError, match=r"cumprod: expected a tensor"):
        te.cumprod([1, 2, 3])


# schedules ---------------------------------------------------------------------------------------

def test_vectorize_the_scan_axis():
    s, Y = cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"vectorize on stage Y: t is the scan axis, whose "
                                            r"steps must run one after another.*vectorize its "
                                            r"spatial axes \(i\)"):
        s[Y].vectorize(s[Y].scan_axis)


def test_parallel_the_scan_axis():
    s, Y = cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"parallel on stage Y: t is the scan axis"):
        s[Y].parallel(s[Y].op.axis[0])


def test_split_the_scan_axis():
    s, Y = cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"split on stage Y: t is the scan axis"):
        s[Y].split(s[Y].scan_axis, factor=4)


def test_fuse_the_scan_axis():
    s, Y = cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"fuse on stage Y: t is the scan axis"):
        s[Y].fuse(*s[Y].op.axis)


def test_inline_a_scan():
    Y = scan_of(lambda S, t, i: S[t - 1, i] + X[t, i])
    out = te.compute((T, M), lambda t, i: Y[t, i] * 2.0, name="out")
    s = create_schedule(out)
    with pytest.raises(ScheduleError, match=r"compute_inline: stage Y is a scan, whose steps "
                                            r"read its earlier steps from its buffer"):
        s[Y].compute_inline()


def test_cache_write_a_scan():
    s, Y = cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"cache_write of Y: it is a scan"):
        s.cache_write(Y, "local")


def test_nontemporal_scan():
    s, Y = cumsum_schedule()
    with pytest.raises(ScheduleError, match=r"nontemporal on stage Y: it is a scan"):
        s[Y].nontemporal()


def two_states():
    S0, S1 = te.scan_state((T, M), name="S0"), te.scan_state((T, M), name="S1")
    i0 = te.compute((1, M), lambda _, i: X[0, i], name="i0")
    i1 = te.compute((1, M), lambda _, i: X[0, i], name="i1")
    u0 = te.compute((T, M), lambda t, i: S1[t - 1, i] + X[t, i], name="u0")
    u1 = te.compute((T, M), lambda t, i: S0[t - 1, i] * 2.0 - X[t, i], name="u1")
    return te.scan([i0, i1], [u0, u1], [S0, S1], name="Y")


def test_schedule_the_second_state_of_a_scan():
    a, b = two_states()
    s = create_schedule([a, b])
    with pytest.raises(ScheduleError, match=r"split: Y.v1 is state 1 of the scan Y.v0, whose "
                                            r"states share one loop nest; schedule it through "
                                            r"the first state, s\[Y.v0\]"):
        s[b].split(s[b].op.axis[1], factor=2)


def test_compute_at_a_scan_of_two_states():
    a, b = two_states()
    out = te.compute((T, M), lambda t, i: a[t, i] + b[t, i], name="out")
    s = create_schedule(out)
    with pytest.raises(ScheduleError, match=r"compute_at: stage Y.v0 is a scan of 2 states, "
                                            r"which is computed at the root"):
        s[a].compute_at(s[out], s[out].op.axis[0])


def test_compute_at_the_loops_of_the_second_state():
    a, b = two_states()
    s = create_schedule([a, b])
    i1 = s.stage_named("i1")
    i1.compute_at(s[b], s[b].op.axis[0])
    with pytest.raises(ScheduleError, match=r"stage i1 is computed at a loop of Y.v1, a state "
                                            r"of the scan Y.v0 that has no loops of its own"):
        lower(s, [X, a, b])


def test_cache_read_for_the_second_state_only():
    a, b = two_states()
    s = create_schedule([a, b])
    s.cache_read(X, "local", [s[b]])
    with pytest.raises(ScheduleError, match=r"stage Y.v1, a state of the scan Y.v0, reads "
                                            r"X.local, which is computed after the scan's loops"):
        lower(s, [X, a, b])


def test_scan_computed_where_it_runs_only_some_steps():
    Y = scan_of(lambda S, t, i: S[t - 1, i] + X[t, i])
    last = te.compute((M,), lambda i: Y[T - 1, i], name="last")
    s = create_schedule(last)
    s[Y].compute_at(s[last], s[last].op.axis[0])
    with pytest.raises(ScheduleError, match=r"stage Y is a scan computed at last.i, where its "
                                            r"consumers read 1 of its 9 steps"):
        lower(s, [X, last])


def test_stencil_scan_with_its_scan_loop_inside():
    Y = scan_of(lambda S, t, i: te.if_then_else(i > 0, S[t - 1, i - 1], 0.0) + X[t, i])
    s = create_schedule(Y)
    t, i = s[Y].op.axis
    s[Y].reorder(i, t)
    with pytest.raises(ScheduleError, match=r"stage Y: its scan reads other spatial points of "
                                            r"the step before.*the scan loop t is inside the "
                                            r"loop i"):
        lower(s, [X, Y])


def test_gradient_through_a_scan():
    Y = scan_of(lambda S, t, i: S[t - 1, i] * 0.5 + X[t, i])
    L = te.compute((1,), lambda _: Y[3, 1] * 2.0, name="L")
    with pytest.raises(TEError, match=r"te.gradient: Y is a scan, whose adjoint is a scan "
                                      r"backwards along its scan axis; te.gradient derives it "
                                      r"for te.cumsum \(same dtype\), not for this scan"):
        te.gradient(L, [X])


def test_gradient_through_a_cumulative_product():
    C = te.cumprod(X, axis=1)
    with pytest.raises(TEError, match=r"te.gradient: cumprod is a scan.*not for a cumulative "
                                      r"product"):
        te.gradient(C, [X])


def test_accepts_gradient_after_a_scan():
    C = te.cumsum(X, axis=0)
    L = te.compute((T, M), lambda t, i: C[t, i] * 2.0, name="L")
    (g,) = te.gradient(L, [C])
    assert g.shape == (T, M)


def _scan_reading_a_copy():
    """A scan whose stage already reads a copy of X (its op rewritten by cache_read)."""
    Y = scan_of(lambda S, t, i: S[t - 1, i] + X[t, i])
    out = te.compute((T, M), lambda t, i: Y[t, i] * 2.0, name="out")
    s = create_schedule(out)
    s.cache_read(X, "local", [s[Y]])
    return s, Y, out


def test_scan_reading_a_copy_of_itself():
    s, Y, out = _scan_reading_a_copy()
    with pytest.raises(ScheduleError, match=r"cache_read of Y: Y is a scan, whose steps read "
                                            r"its earlier steps from its own buffer"):
        s.cache_read(Y, "local", [s[Y], s[out]])


def test_pack_a_scan_for_all_its_readers():
    s, Y, out = _scan_reading_a_copy()
    with pytest.raises(ScheduleError, match=r"pack of Y: Y is a scan"):
        s.pack(Y, 1, 2)


def test_scan_computed_at_its_own_loop():
    s, Y, out = _scan_reading_a_copy()
    with pytest.raises(ScheduleError, match=r"compute_at: stage Y cannot be computed at a loop "
                                            r"of its own"):
        s[Y].compute_at(s[Y], s[Y].op.axis[0])


def test_accepts_copies_of_a_scan_for_its_consumers():
    s, Y, out = _scan_reading_a_copy()
    s.cache_read(Y, "local", [s[out]])
    assert [st.name for st in s.stages] == ["X", "init", "X.local", "Y", "Y.local", "out"]


def test_cut_a_scan_of_two_states_off_the_stage_it_reads():
    from einloop.te.partition import cut
    a, b = two_states()
    inits = [t for t in a.op.input_tensors if t.name in ("i0", "i1")]
    with pytest.raises(TEError, match=r"cutting Y.v0 off from i0, i1: Y.v0 is one of the 2 "
                                      r"states of a scan, which is not declared again"):
        cut([a, b], inits)


def test_accepts_a_scan_state_read_outside_a_scan_clamped():
    """A compute that reads a scan state but never goes into te.scan reads it clamped, like
    any placeholder whose reads cannot be proven inside, so it cannot read outside its buffer."""
    S = te.scan_state((T, M), name="S")
    Y = te.compute((T, M), lambda t, i: S[t - 1, i] * 1.0, name="Y")
    assert "max(min(t - 1, 8), 0)" in str(Y.op.body)


def test_inputs_that_are_not_tensors():
    init, upd, S = parts()
    with pytest.raises(TEError, match=r"scan 'Y': inputs must be a tensor or a list of tensors"):
        te.scan(init, upd, S, inputs=["X"], name="Y")


def test_compute_at_the_first_state_what_the_second_reads():
    a, b = two_states()
    s = create_schedule([a, b])
    i1 = s.stage_named("i1")
    i1.compute_at(s[a], s[a].op.axis[0])
    with pytest.raises(ScheduleError, match=r"stage i1 is computed at Y.v0.t, a loop of the scan "
                                            r"Y.v0, but the scan's state Y.v1 reads it too"):
        lower(s, [X, a, b])


def test_accepts_compute_at_the_first_state_what_only_it_reads():
    a, b = two_states()
    s = create_schedule([a, b])
    i0 = s.stage_named("i0")
    i0.compute_at(s[a], s[a].op.axis[1])
    assert "allocate i0" in str(lower(s, [X, a, b]))


def test_scan_state_of_a_bad_shape():
    with pytest.raises(TEError, match=r"scan_state 'S': shape \(4, 0\) has the entry 0"):
        te.scan_state((4, 0), name="S")
