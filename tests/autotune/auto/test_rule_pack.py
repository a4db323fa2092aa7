"""Rule 4: packing a reused operand as a knob (GEMM's B panel, conv2d's weights)."""
import ops
import pytest

from rule_ops import AVX2, check_steps, steps_of
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.autotune.space.sketch.analysis import DagAnalysis
from einloop.autotune.space.sketch.rules import PACK_NONE


def test_packable_operands():
    an = DagAnalysis(ops.gemm()[1], AVX2)
    (c,) = [f for f in an.stages()]
    assert [(src.name, dim) for src, dim, _ in c.packable] == [("A", 0), ("B", 1)]
    an = DagAnalysis(ops.conv2d()[1], AVX2)
    assert [(src.name, dim) for src, dim, _ in an.stages()[-1].packable] == [("W", 0)]


def test_pack_b_by_the_tile_of_j():
    ins, outs, ref = ops.gemm(32, 48, 24)
    sp = generate_space(outs, AVX2)
    assert RuleKind.PACK in sp.fired["C"]
    steps = steps_of(sp, C__tile__j=(-1, 1, 3, 16), C__cache=2, C__pack__B=1, C__pack__A=0)
    packs = [st for st in steps if st.kind.value == "pack"]
    assert [(st.stage, dict(st.args)) for st in packs] == [
        ("B", {"axis": 1, "factor": 48, "readers": ("C",)})]
    assert any(st.stage == "B.pack" and st.kind.value == "parallel" for st in steps)
    check_steps(steps, ins, outs, ref)
    off = steps_of(sp, C__pack__B=0, C__pack__A=0)
    assert "pack" not in [st.kind.value for st in off]


def test_pack_b_per_block_of_the_parallel_loop():
    """Packed per block, B's copy is made inside the parallel outer loop, only the block's
    columns of it (as BLAS packs a panel of B), for every accumulator level."""
    from einloop import lower
    from einloop.schedule.replay import replay
    ins, outs, ref = ops.gemm(30, 64, 24)
    sp = generate_space(outs, AVX2)
    for level in (2, 1, 0):
        steps = steps_of(sp, C__tile__i=(-1, 5, 1, 6), C__tile__j=(-1, 1, 1, 16), C__cache=level,
                         C__pack__B=2, C__pack__A=0)
        at = [st for st in steps if st.stage == "B.pack" and st.kind.value == "compute_at"]
        assert len(at) == 1 and dict(at[0].args)["parent"] == "C"
        assert not any(st.stage == "B.pack" and st.kind.value == "parallel" for st in steps)
        text = str(lower(replay(steps, outs), ins + outs))
        body = text[text.index("parallel for"):]
        assert "allocate B.pack: float32[1 * 24 * 16]" in body, text
        check_steps(steps, ins, outs, ref)


def test_a_block_copy_of_the_last_axis_reads_its_source_row_by_row():
    """A block of two 16-column panels of B[K, N]: the copy runs k outer and the panels inside,
    so it reads each row's 32 contiguous columns at once (the copy's own order would read 16
    columns of every row, then the next 16 of every row: a 4 KB stride per step at N = 1024)."""
    from einloop import lower
    from einloop.schedule.replay import replay
    ins, outs, ref = ops.gemm(30, 64, 24)
    sp = generate_space(outs, AVX2)
    steps = steps_of(sp, C__tile__i=(-1, 5, 1, 6), C__tile__j=(-1, 2, 1, 16), C__cache=2,
                     C__pack__B=2, C__pack__A=0)
    text = str(lower(replay(steps, outs), ins + outs))
    copy = text[text.index("allocate B.pack: float32[2 * 24 * 16]"):text.index("B.pack[") + 200]
    assert copy.index("for ax0 in range(24):") < copy.index("for ax1.outer in range(2):"), text
    check_steps(steps, ins, outs, ref)


def test_pack_conv_weights():
    ins, outs, ref = ops.conv2d()
    sp = generate_space(outs, AVX2)
    steps = steps_of(sp, Out__pack__W=1)
    assert [st.stage for st in steps if st.kind.value == "pack"] == ["W"]
    check_steps(steps, ins, outs, ref)


def _q_kt(S=24, D=12):
    from einloop import te
    Q = te.placeholder((S, D), name="Q")
    K = te.placeholder((S, D), name="K")
    d = te.reduce_axis((0, D), name="d")
    L = te.compute((S, S), lambda i, j: te.sum(Q[i, d] * K[j, d], axis=d), name="L")
    return [Q, K], [L], lambda q, k: [q @ k.T]


def test_operand_strided_along_the_last_axis_is_packed_and_vectorized():
    """Q @ K^T reads K[j, d]: j strides by D, but packed along j it is contiguous, so j is still
    the vector loop (it used to be left scalar)."""
    ins, outs, ref = _q_kt()
    (f,) = DagAnalysis(outs, AVX2).stages()
    assert f.vector_ok and ("K", 0) in [(src.name, dim) for src, dim, _ in f.packable]
    sp = generate_space(outs, AVX2)
    seed = sp.seed_configs(1)[0]
    assert seed["L.pack.K"].val != PACK_NONE and seed["L.tile.j"].size[-1] > 1
    steps = sp.steps(seed)
    assert any(st.stage == "L" and st.kind.value == "vectorize" for st in steps)
    check_steps(steps, ins, outs, ref)


def test_a_block_not_aligned_to_the_columns_reads_whole_panels_without_a_warning():
    """24 columns in blocks of 16: the last block reads B.pack[j // 16, k, j % 16] over 8
    columns, which lowering computes as the whole panel of 16 (what the packed layout holds):
    the exact region, not a fallback worth a RegionFallbackWarning."""
    import warnings
    from einloop.errors import RegionFallbackWarning
    ins, outs, ref = ops.gemm(30, 24, 32)
    sp = generate_space(outs, AVX2)
    for level in (2, 1):
        steps = steps_of(sp, C__tile__i=(-1, 5, 1, 6), C__tile__j=(-1, 1, 1, 16), C__cache=level,
                         C__pack__B=2, C__pack__A=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RegionFallbackWarning)
            check_steps(steps, ins, outs, ref)


def test_a_skinny_gemm_is_first_seeded_with_row_blocks_streaming_its_weight():
    """At 16 rows (a dense layer at batch 16) the first seed runs blocks of 4 rows over all the
    columns in strips of 2 vectors, its accumulator in the block (level 1), B read in place (no
    copy), the reduction unrolled by SKINNY_K_UNROLL; with one row block per core too few, the
    columns are split between the cores; with many rows it is not proposed."""
    from einloop.autotune.space.sketch.seeds import SKINNY_K_UNROLL, SKINNY_ROWS
    ins, outs, ref = ops.gemm(16, 1024, 64)
    sp = generate_space(outs, AVX2)
    seed = sp.seed_configs(1)[0]
    assert seed["C.cache"].val == 1 and seed["C.pack.B"].val == PACK_NONE
    assert seed["C.tile.i"].size[1:] == (1, 1, SKINNY_ROWS) == (1, 1, 4)
    assert seed["C.tile.j"].size[1:] == (1, 64, 16)
    assert seed["C.tile.k"].size[1:] == (SKINNY_K_UNROLL,) == (4,)
    check_steps(sp.steps(seed), ins, outs, ref)
    ins, outs, ref = ops.gemm(3, 1024, 64)          # one block of 3 rows: two column blocks
    seed = generate_space(outs, AVX2).seed_configs(1)[0]
    assert seed["C.tile.i"].size[1:] == (1, 1, 3) and seed["C.tile.j"].size[1:] == (1, 32, 16)
    check_steps(generate_space(outs, AVX2).steps(seed), ins, outs, ref)
    ins, outs, ref = ops.gemm(64, 1024, 64)
    seed = generate_space(outs, AVX2).seed_configs(1)[0]
    assert seed["C.cache"].val == 2


@pytest.mark.parametrize("k", [1024, 1000, 37])
def test_one_row_is_seeded_as_a_gemv_streaming_its_weight(k):
    """A dense layer at batch 1 has no row axis to block, yet is the most skinny of all: its
    first seeds stream the weight in place, the columns split between the model's cores, the
    reduction unrolled by the divisor of k nearest each of GEMV_K_UNROLLS in turn; they compute
    the product."""
    from einloop.autotune.space.sketch.seeds import GEMV_K_UNROLLS
    ins, outs, ref = ops.gemm(1, 96, k)
    sp = generate_space(outs, AVX2)
    seeds = sp.seed_configs(3)
    if k == 1024:
        assert [x["C.tile.k"].size[-1] for x in seeds] == list(GEMV_K_UNROLLS) == [16, 8, 4]
    seed = seeds[0]
    assert seed["C.cache"].val == 1
    assert "C.pack.B" not in sp.config_space.knobs or seed["C.pack.B"].val == PACK_NONE
    strip = seed["C.tile.j"].size[-1]
    assert strip % AVX2.lanes == 0 and 96 // (seed["C.tile.j"].size[-2] * strip) == AVX2.cores
    unroll = seed["C.tile.k"].size[-1]
    assert k % unroll == 0 and unroll <= 2 * GEMV_K_UNROLLS[0]
    assert unroll == {1024: 16, 1000: 20, 37: 1}[k]
    check_steps(sp.steps(seed), ins, outs, ref)
