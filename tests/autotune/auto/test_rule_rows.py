"""Rule 5: long reductions without reuse get rfactor; row stages are computed at the row loop."""
import numpy as np

import ops
from einloop import te
from rule_ops import AVX2, check_steps, kinds, steps_of
from einloop.autotune.space.sketch import RuleKind, generate_space


def test_softmax_rfactor_and_one_pass_per_row():
    ins, outs, ref = ops.softmax(9, 64)
    sp = generate_space(outs, AVX2)
    for name in ("Mx", "S"):
        assert sp.fired[name][:2] == (RuleKind.RFACTOR, RuleKind.COMPUTE_LOCATION)
    assert sp.fired["E"][0] is RuleKind.COMPUTE_LOCATION
    steps = steps_of(sp, Mx__rfactor="vec", S__rfactor="vec", Out__at=0)
    assert [st.stage for st in steps if st.kind.value == "rfactor"] == ["Mx", "S"]
    at = {st.stage: (st.args["parent"], st.args["axis"]) for st in steps
          if st.kind.value == "compute_at"}
    assert set(at) == {"Mx", "Mx.rf", "E", "S", "S.rf"}
    assert set(at.values()) == {("Out", "i")}
    assert "vectorize" in kinds(steps, "Mx.rf") and "parallel" not in kinds(steps, "Mx.rf")
    check_steps(steps, ins, outs, ref)


def test_rows_at_root_and_no_rfactor():
    ins, outs, ref = ops.softmax(9, 64)
    sp = generate_space(outs, AVX2)
    steps = steps_of(sp, Mx__rfactor="none", S__rfactor="none", Out__at="root")
    assert "rfactor" not in kinds(steps) and "compute_at" not in kinds(steps)
    assert "parallel" in kinds(steps, "Mx")
    check_steps(steps, ins, outs, ref)


def test_layer_norm_and_short_rows():
    ins, outs, ref = ops.layer_norm(7, 40)
    sp = generate_space(outs, AVX2)
    assert RuleKind.RFACTOR in sp.fired["Sum"] and RuleKind.RFACTOR in sp.fired["Var"]
    for c in range(len(sp.config_space)):
        check_steps(sp.steps(c), ins, outs, ref)
    short = generate_space(ops.softmax(9, 7)[1], AVX2)     # 7 < two vectors: no rfactor
    assert RuleKind.RFACTOR not in short.fired["Mx"]


def _full_sum(M, N):
    A = te.placeholder((M, N), name="A")
    k = te.reduce_axis((0, M), name="k")
    l = te.reduce_axis((0, N), name="l")
    S = te.compute((1,), lambda i: te.sum(A[k, l], axis=[k, l]), name="S")
    return [A], [S], lambda a: [a.sum(dtype=np.float64).reshape(1)]


def test_sum_over_all_axes_is_parallel_and_vectorized():
    ins, outs, ref = _full_sum(67, 129)            # odd sizes: chunk and lane tails
    sp = generate_space(outs, AVX2)
    assert RuleKind.RFACTOR in sp.fired["S"]
    assert "par" in sp.config_space.knobs["S.rfactor"].describe()
    steps = steps_of(sp, S__rfactor="par")
    assert kinds(steps).count("rfactor") == 2
    rf = [st.stage for st in steps if st.kind.value == "rfactor"]
    assert "parallel" in kinds(steps, "S.rf.rf") and "vectorize" in kinds(steps, "S.rf.rf"), rf
    check_steps(steps, ins, outs, ref, rtol=1e-3)
    for mode in ("none", "vec"):
        check_steps(steps_of(sp, S__rfactor=mode), ins, outs, ref, rtol=1e-3)


def test_several_vectors_of_partial_sums_compute_the_same():
    """The accumulators knob: an rfactor of 1, 2 or 4 vectors (independent add chains), on odd
    sizes (lane and chunk tails), in each rfactor mode; 4 only where the reduction is at least
    RFACTOR_MIN_VECTORS such groups long."""
    ins, outs, ref = _full_sum(67, 129)
    sp = generate_space(outs, AVX2)
    assert sp.config_space.knobs["S.acc"].describe().endswith("choices: 1, 2, 4")
    for mode in ("vec", "par"):
        for acc in (1, 2, 4):
            steps = steps_of(sp, S__rfactor=mode, S__acc=acc)
            first_split = next(st for st in steps if st.kind.value == "split")
            assert first_split.args["factor"] == 8 * acc            # AVX2: 8 lanes a vector
            check_steps(steps, ins, outs, ref, rtol=1e-3)
    _, short, _ = _full_sum(3, 16)                  # 48 elements: 4 x 8 lanes twice is 64
    sp = generate_space(short, AVX2)
    assert sp.config_space.knobs["S.acc"].describe().endswith("choices: 1, 2")
    gins, gouts, gref = _gemv(37, 100)
    sp = generate_space(gouts, AVX2)
    check_steps(steps_of(sp, y__sketch="rows", y__acc=4), gins, gouts, gref)


def test_many_rows_get_no_parallel_rfactor():
    ins, outs, ref = ops.softmax(64, 256)
    sp = generate_space(outs, AVX2)
    assert "par" not in sp.config_space.knobs["Mx.rfactor"].describe()


def _gemv(M, K):
    A = te.placeholder((M, K), name="A")
    x = te.placeholder((K,), name="x")
    k = te.reduce_axis((0, K), name="k")
    y = te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), name="y")
    return [A, x], [y], lambda a, v: [a @ v]


def test_gemv_may_be_a_row_reduction_or_tiled():
    ins, outs, ref = _gemv(37, 100)
    sp = generate_space(outs, AVX2)
    assert sp.fired["y"][:2] == (RuleKind.MULTI_LEVEL_TILING, RuleKind.RFACTOR)
    rows = steps_of(sp, y__sketch="rows")
    assert kinds(rows).count("rfactor") == 1 and "cache_write" not in kinds(rows)
    assert "vectorize" in kinds(rows, "y.rf") and "parallel" in kinds(rows, "y")
    assert "compute_at" in kinds(rows, "y.rf")     # at y's parallel row loop
    check_steps(rows, ins, outs, ref)
    tiled = steps_of(sp, y__sketch="tile")
    assert "rfactor" not in kinds(tiled) and "cache_write" in kinds(tiled)
    check_steps(tiled, ins, outs, ref)
    seeds = {c["y.sketch"].val for c in sp.seed_configs(4)}
    assert seeds == {"tile", "rows"}


def test_gemv_rows_run_in_one_parallel_region_side_by_side():
    """The rows sketch: the lanes of each block of rows are reduced at that block's loop of the
    final stage (one parallel loop in all), the block's rows inside the reduction, unrolled;
    on 37 rows (a ragged last block) and batched."""
    ins, outs, ref = _gemv(37, 100)
    sp = generate_space(outs, AVX2)
    assert sp.config_space.knobs["y.interleave"].describe().endswith("choices: 1, 2, 4, 8")
    for rows in (1, 2, 4, 8):
        steps = steps_of(sp, y__sketch="rows", y__interleave=rows)
        if rows > 1:
            assert "unroll" in kinds(steps, "y.rf")
        check_steps(steps, ins, outs, ref)
        if rows == 8:               # 5 blocks for 2 cores: fused with the rows, lanes at the root
            continue
        assert kinds(steps).count("parallel") == 1, steps
        at = [st for st in steps if st.kind.value == "compute_at"]
        assert [(st.stage, st.args["parent"]) for st in at] == [("y.rf", "y")]
    A = te.placeholder((3, 21, 64), name="A")
    x = te.placeholder((3, 64), name="x")
    k = te.reduce_axis((0, 64), name="k")
    y = te.compute((3, 21), lambda b, i: te.sum(A[b, i, k] * x[b, k], axis=k), name="y")
    sp = generate_space([y], AVX2)
    steps = steps_of(sp, y__sketch="rows", y__interleave=4)
    check_steps(steps, [A, x], [y], lambda a, v: [np.einsum("bik,bk->bi", a, v)])


def test_rows_never_hosted_by_a_loop_over_the_columns():
    """Every attach choice puts the row reductions at a row loop: at a loop over the output's
    columns each would be recomputed per column vector (such configs took > 10 s to measure)."""
    ins, outs, ref = ops.softmax(9, 64)
    sp = generate_space(outs, AVX2)
    for at in (0, 1, 2):
        steps = steps_of(sp, Mx__rfactor="none", S__rfactor="none", Out__at=at, E__inline=1)
        at_loops = {(st.args["parent"], st.args["axis"]) for st in steps
                    if st.kind.value == "compute_at"}
        assert at_loops == {("Out", "i")}, (at, at_loops)
        check_steps(steps, ins, outs, ref)
