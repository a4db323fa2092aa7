"""schedule/verify.py: the whole-schedule legality checks, run once, in order, before lowering.

The error suite (tests/errors) pins each message; these tests pin what verify adds: one named
list, run first, in the order lowering used to meet the checks, with the facts it computes
reused by lowering; and the passes after it treating a broken assumption as an internal error.
"""
import pytest

from einloop import te, create_schedule, lower
from einloop.errors import BuildError, InternalError, ScheduleError
from einloop.ir.expr import Var, const
from einloop.ir.stmt import Buffer, For, ForKind, Scope, Store
from einloop.schedule import bound, verify as V
from einloop.schedule.passes.unroll import MAX_UNROLL, unroll_loops


def chain(n=16):
    """P -> F -> G (elementwise, 1-D)."""
    P = te.placeholder((n,), name="P")
    F = te.compute((n,), lambda i: P[i] * 2.0, name="F")
    G = te.compute((n,), lambda i: F[i] + 1.0, name="G")
    return P, F, G


def test_checks_are_named_functions_in_one_ordered_list():
    names = [c.__name__ for c in V.CHECKS]
    assert isinstance(V.CHECKS, tuple) and len(set(names)) == len(names)
    assert all(callable(c) and not n.startswith("_") for c, n in zip(V.CHECKS, names))
    # the arguments first (later checks read arg_stages), bound-dependent checks last
    assert names.index("args_are_tensors") == 0
    assert names.index("attach_loops_enclose_consumers") < names.index("local_buffers_fit_memory")
    assert names[-1] == "loop_annotations_hold"


def test_verify_runs_every_check_in_order(monkeypatch):
    P, F, G = chain()
    ran, names = [], [c.__name__ for c in V.CHECKS]
    monkeypatch.setattr(V, "CHECKS", tuple(
        (lambda f, c=c: ran.append(c.__name__) or c(f)) for c in V.CHECKS))
    facts = V.verify(create_schedule(G), (P, G))
    assert ran == names
    assert facts.args == [P, G]


def test_lower_infers_bounds_once(monkeypatch):
    """The bounds verify computed for its checks are the ones lowering uses."""
    P, F, G = chain()
    s = create_schedule(G)
    s[F].compute_at(s[G], s[G].op.axis[0])
    calls = []
    real = V.infer_bounds
    monkeypatch.setattr(V, "infer_bounds", lambda *a: calls.append(1) or real(*a))
    lower(s, [P, G])
    assert calls == [1]


def test_a_single_tensor_is_the_argument_list():
    P, F, G = chain()
    s = create_schedule(P)
    assert V.verify(s, P).args == [P]


def test_verify_rejects_without_lowering():
    """The unroll limit is a verify check: lowering never starts."""
    A = te.placeholder((2 * MAX_UNROLL,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    s = create_schedule(B)
    s[B].unroll(s[B].op.axis[0])
    with pytest.raises(ScheduleError, match=rf"stage B: unrolling loop i of extent "
                                            rf"{2 * MAX_UNROLL} would copy .*limit {MAX_UNROLL}"):
        V.verify(s, [A, B])


def test_unroll_limit_counts_the_compute_at_region():
    """A loop of a stage computed at a loop is as long as the region needed there, which only
    bound inference knows: a long axis whose tile is short may be unrolled."""
    n = 4 * MAX_UNROLL
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = create_schedule(C)
    co, ci = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], co)
    s[B].unroll(s[B].op.axis[0])
    text = str(lower(s, [A, C]))
    assert "unrolled" not in text and text.count("A[") == 8


def test_the_unroll_pass_trusts_verify():
    """The limit is checked once, in verify; the pass meeting a longer loop is a bug."""
    i = Var("i")
    buf = Buffer("X", "float32", (MAX_UNROLL + 1,), Scope.ARG)
    loop = For(i, MAX_UNROLL + 1, ForKind.UNROLLED, Store(buf, i, const(1.0, "float32")))
    with pytest.raises(InternalError, match="verify"):
        unroll_loops(loop)


def test_bound_inference_trusts_verify():
    """A stage computed at a loop that cache_write took away: verify says so (ScheduleError);
    bound inference on the unverified schedule treats it as a broken invariant."""
    A = te.placeholder((8, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    P = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="P")
    C = te.compute((8,), lambda i: te.sum(P[i, k], axis=k), name="C")
    s = create_schedule(C)
    s[P].compute_at(s[C], s[C].op.reduce_axis[0])
    s.cache_write(C, "local")              # C's loops are now just i: k moved to C.local
    with pytest.raises(ScheduleError, match=r"loop k of stage C, where another stage is "
                                            r"computed, is no longer one of its loops \(i\)"):
        V.verify(s, [A, C])
    with pytest.raises(InternalError, match="verify"):
        bound.infer_bounds(s, V.Facts(s, [A, C]).bodies)


def test_the_first_check_in_the_list_wins():
    """Two problems: the output missing from args (an argument check) is reported, not the
    stage computed at a vectorized loop (a later check)."""
    P, F, G = chain()
    s = create_schedule(G)
    o, i = s[G].split(G.op.axis[0], factor=4)
    s[G].vectorize(o)
    s[F].compute_at(s[G], o)
    with pytest.raises(BuildError, match="the output G is not in args"):
        lower(s, [P])
    with pytest.raises(ScheduleError, match="F is computed at the vectorized loop i.outer"):
        lower(s, [P, G])


def test_annotations_are_checked_in_emission_order():
    """As when the loop-nest builder checked them: the root stage before the stages computed at
    its loops (though those come first in stage order)."""
    def schedule(unroll_g):
        P, F, G = chain(n=2048)
        s = create_schedule(G)
        go, gi = s[G].split(G.op.axis[0], factor=1024)
        s[F].compute_at(s[G], go)
        s[F].unroll(F.op.axis[0])       # 1024 at G's loop: too many to unroll
        if unroll_g:
            s[G].unroll(gi)             # so is this
        return s, [P, G]
    with pytest.raises(ScheduleError, match=r"stage G: unrolling loop i\.inner of extent 1024"):
        lower(*schedule(True))
    with pytest.raises(ScheduleError, match=r"stage F: unrolling loop i of extent 1024"):
        lower(*schedule(False))


def test_buffer_sizes_are_checked_against_memory_limit(monkeypatch):
    monkeypatch.setattr(V, "memory_limit", lambda: 4096)
    P = te.placeholder((2048,), name="P")
    F = te.compute((2048,), lambda i: P[i] * 2.0, name="F")       # 8192 bytes at the root
    G = te.compute((2048,), lambda i: F[i] + 1.0, name="G")
    s = create_schedule(G)
    with pytest.raises(BuildError, match=r"stage F, computed at the root, .*8192 bytes"):
        lower(s, [P, G])
    go, gi = s[G].split(G.op.axis[0], factor=64)
    s[F].compute_at(s[G], go)                                      # a 256-byte tile: fine
    lower(s, [P, G])


def test_reduction_init_nest_keeps_data_guards_only():
    """The initialisation of a reduction runs over the data loops only, under the guards of the
    data axes, before the first reduction loop."""
    A = te.placeholder((10, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    C = te.compute((10,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    ko, ki = s[C].split(k, factor=3)
    s[C].reorder(io, ko, ii, ki)
    text = str(lower(s, [A, C], expand_unroll=False))
    init, update = text.split("for k.outer")
    assert "C[i.outer * 4 + i.inner] = 0.0f" in init and "i.outer * 4 + i.inner < 10" in init
    assert "k.inner" not in init and "< 7" not in init
    assert "k.outer * 3 + k.inner < 7" in update
