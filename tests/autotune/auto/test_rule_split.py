"""Rule 5's split-k sketch: a tiled stage with few rows (a dense layer at batch 1, SwiGLU's two
projections) may split its reduction into per-core parts, each streaming its own block of the
weight into partial sums that a short stage adds up; on odd sizes, against NumPy."""
import pytest

import ops
from rule_ops import AVX2, check_steps, gemm_relu, kinds, steps_of
from einloop.autotune.space.sketch import MachineModel, RuleKind, generate_space
from einloop.autotune.space.sketch.rules import (SPLIT_K_UNROLLS, SPLIT_MAX_ROWS,
                                                 SPLIT_MIN_PART_ROWS)


def dense_relu(n, k, m):
    """relu(X @ W + b), W k x m read along its rows (the vector axis is W's contiguous one); its
    product is the stage C."""
    return gemm_relu(M=n, N=m, K=k)


@pytest.mark.parametrize("n", [1, 3])
def test_a_dense_layer_with_few_rows_may_split_its_reduction(n):
    ins, outs, ref = dense_relu(n, 203, 100)         # 203 rows of W, 100 columns: both ragged
    sp = generate_space(outs, AVX2)
    assert RuleKind.RFACTOR in sp.fired["C"]
    assert sp.config_space.knobs["C.sketch"].describe().endswith("choices: tile, split")
    # every value of each knob at least once (all 18 combinations cost 10 s of compiling)
    for parts, unroll, vectors in zip((1, 2, 1, 2), SPLIT_K_UNROLLS + SPLIT_K_UNROLLS[:1],
                                      (1, 2, 4, 4)):
        steps = steps_of(sp, C__sketch="split", C__parts=parts, C__kunroll=unroll,
                         C__vec=vectors)
        assert kinds(steps).count("rfactor") == 1 and "cache_write" not in kinds(steps)
        assert kinds(steps, "C.rf").count("parallel") == 1     # over the parts
        assert "vectorize" in kinds(steps, "C.rf") and "unroll" in kinds(steps, "C.rf")
        rf = next(st for st in steps if st.kind.value == "rfactor")
        assert rf.args["factor_axis"] == 0
        check_steps(steps, ins, outs, ref)
    tiled = steps_of(sp, C__sketch="tile")
    assert "rfactor" not in kinds(tiled)
    check_steps(tiled, ins, outs, ref)
    seeds = {c["C.sketch"].val for c in sp.seed_configs(8)}
    assert seeds == {"tile", "split"}


def test_swiglus_two_projections_split_at_batch_one():
    ins, outs, ref = ops.swiglu(1, 130, 48)
    sp = generate_space(outs, AVX2)
    for stage in ("G", "U"):
        assert RuleKind.RFACTOR in sp.fired[stage]
    steps = steps_of(sp, G__sketch="split", U__sketch="split", G__parts=2, U__kunroll=4)
    assert kinds(steps).count("rfactor") == 2
    check_steps(steps, ins, outs, ref, rtol=1e-3)
    mixed = steps_of(sp, G__sketch="split", U__sketch="tile")   # one split, one tiled
    check_steps(mixed, ins, outs, ref, rtol=1e-3)


@pytest.mark.parametrize("shape, why", [
    ((SPLIT_MAX_ROWS + 1, 203, 100), "more rows than a streaming kernel"),
    ((1, 2 * SPLIT_MIN_PART_ROWS - 1, 100), "parts shorter than SPLIT_MIN_PART_ROWS"),
    ((1, 203, 4), "fewer columns than a vector"),
])
def test_the_split_sketch_needs_few_rows_long_parts_and_a_vector(shape, why):
    ins, outs, ref = dense_relu(*shape)
    sp = generate_space(outs, AVX2)
    assert "C.sketch" not in sp.config_space.knobs, why


def test_parts_follow_the_cores_the_model_states():
    """Each part is at least SPLIT_MIN_PART_ROWS rows whatever the core count: 4 cores take
    a 203-row reduction in 4 parts only; 8 cores do not split it at all."""
    ins, outs, ref = dense_relu(1, 203, 100)
    four = generate_space(outs, MachineModel(lanes=8, registers=16, cores=4, min_parallel_points=1))
    assert "C.parts" not in four.config_space.knobs
    steps = steps_of(four, C__sketch="split")
    rf = next(st for st in steps if st.kind.value == "split" and st.args.get("nparts"))
    assert rf.args["nparts"] == 4
    check_steps(steps, ins, outs, ref)
    eight = generate_space(outs, MachineModel(lanes=8, registers=16, cores=8, min_parallel_points=1))
    assert "C.sketch" not in eight.config_space.knobs
