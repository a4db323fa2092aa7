"""Rules 6 and 7: parallel outer loops, vectorized contiguous loop, unroll steps, fallback."""
import re
import warnings

import ops
import pytest
from rule_ops import AVX2, check_steps, kinds
from einloop import create_schedule, te
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.autotune.space.sketch import generate as space_mod
from einloop.autotune.space.sketch.apply import annotate_plain, unroll_inner
from einloop.autotune.space.sketch.generate import Relax
from einloop.errors import InternalError, RuleFailureWarning


def test_plain_annotation_of_a_reduction():
    ins, outs, ref = ops.multi_axis_reduce(5, 6, 7, 24)
    s = create_schedule(outs[0])
    loops = annotate_plain(s[outs[0]], lanes=8, cores=2, min_points=1)
    assert [st.kind.value for st in s.steps] == ["split", "reorder", "vectorize", "parallel"]
    assert s.steps[1].args["axes"] == ("i", "r1", "r2", "j.outer", "j.inner")  # rows stream
    assert [iv.name for iv in loops] == ["i"]        # j.outer sits inside the reduction
    assert s.steps[-1].args["axis"] == "i"


def test_plain_annotation_fuses_outer_loops_for_parallelism():
    X = te.placeholder((3, 2, 40), name="X")
    Y = te.compute((3, 2, 40), lambda a, b, c: X[a, b, c] * 2.0, name="Y")
    s = create_schedule(Y)
    loops = annotate_plain(s[Y], lanes=8, cores=1, min_points=1)  # fuse: 4 iterations a core
    assert kinds(s.steps) == ["split", "reorder", "vectorize", "fuse", "parallel"]
    assert loops[0].name == "a.b.fused" and loops[0].extent == 6
    assert [iv.name for iv in loops[1:]] == ["c.outer"]


def test_unroll_step_limits_the_unrolled_product():
    ins, outs, _ = ops.gemm(8, 8, 8)
    s = create_schedule(outs)
    st = s[outs[0]]
    ko, ki = st.split(st.op.reduce_axis[0], factor=4)
    i, j = st.op.axis
    st.reorder(ko, i, ki, j)
    st.vectorize(j)
    unroll_inner(st, [(ko, 2), (i, 8), (ki, 4), (j, 8)], 32)
    assert [x.args["axis"] for x in s.steps if x.kind.value == "unroll"] == ["k.inner", "i"]
    s2 = create_schedule(outs)
    unroll_inner(s2[outs[0]], [(iv, 8) for iv in s2[outs[0]].leaf_iter_vars], 0)
    assert "unroll" not in kinds(s2.steps)


def test_fallback_on_an_elementwise_output():
    X = te.placeholder((30, 20), name="X")
    Y = te.compute((20, 30), lambda i, j: X[j, i] + 1.0, name="Y")       # a transpose
    sp = generate_space(Y, AVX2)
    assert sp.fired["Y"] == (RuleKind.FALLBACK,)
    check_steps(sp.steps(sp.config_space.default_index()), [X], [Y], lambda x: [x.T + 1])


def test_a_failing_rule_costs_its_sketch_not_the_space_and_says_so(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("rule bug")
    monkeypatch.setattr("einloop.autotune.space.sketch.apply.apply_tiling", broken)
    monkeypatch.setattr(space_mod, "_warned", set())
    ins, outs, ref = ops.gemm()
    said = r"the multi-level tiling rule failed on stage C with RuntimeError: rule bug"
    with pytest.raises(InternalError, match=said):          # the test suite's strict setting
        space_mod.generate_space(outs, AVX2)
    monkeypatch.setenv("EINLOOP_STRICT_RULES", "0")        # a user's: one warning, then quiet
    with pytest.warns(RuleFailureWarning, match=said + r".*rules relaxed: NO_TILING"):
        sp = space_mod.generate_space(outs, AVX2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert space_mod.generate_space(outs, AVX2).relax is Relax.NO_TILING
    assert sp.relax is Relax.NO_TILING
    assert RuleKind.MULTI_LEVEL_TILING not in sp.fired["C"]
    check_steps(sp.steps(sp.config_space.default_index()), ins, outs, ref)


def test_every_failing_rule_is_reported_not_only_the_last(monkeypatch):
    """rfactor fails on S, then (rfactor dropped) tiling fails on C: both rules are named, each
    with its own error, and strict mode raises the first."""
    def broken(what):
        def fail(*a, **k):
            raise RuntimeError(f"{what} bug")
        return fail
    monkeypatch.setattr("einloop.autotune.space.sketch.apply.rfactor_rows", broken("rfactor"))
    monkeypatch.setattr("einloop.autotune.space.sketch.apply.apply_tiling", broken("tiling"))
    monkeypatch.setattr(space_mod, "_warned", set())
    A, B = te.placeholder((16, 12), name="A"), te.placeholder((12, 40), name="B")
    k, r = te.reduce_axis((0, 12), name="k"), te.reduce_axis((0, 40), name="r")
    C = te.compute((16, 40), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    S = te.compute((16,), lambda i: te.sum(C[i, r], axis=r), name="S")
    rfactor = r"the rfactor rule failed on stage S with RuntimeError: rfactor bug"
    tiling = r"the multi-level tiling rule failed on stage C with RuntimeError: tiling bug"
    with pytest.raises(InternalError, match=rfactor):
        space_mod.generate_space(S, AVX2)
    monkeypatch.setenv("EINLOOP_STRICT_RULES", "0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sp = space_mod.generate_space(S, AVX2)
    said = [str(w.message) for w in caught if issubclass(w.category, RuleFailureWarning)]
    assert len(said) == 2, said
    assert re.search(rfactor + r".*rules relaxed: NO_TILING", said[0])
    assert re.search(tiling + r".*rules relaxed: NO_TILING", said[1])
    assert sp.relax is Relax.NO_TILING
    check_steps(sp.steps(sp.config_space.default_index()), [A, B], [S],
                lambda a, b: [(a @ b).sum(axis=1)])


@pytest.mark.parametrize("name", sorted(ops.ZOO))
def test_describe_names_every_stage(name):
    sp = generate_space(ops.ZOO[name]()[1], AVX2)
    text = sp.describe()
    for f in sp.analysis.stages():
        assert f.name in text and sp.fired[f.name]
