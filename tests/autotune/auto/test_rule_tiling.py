"""Rule 2: multi-level tiling (S0 S1 R0 S2 R1 S3) with a cache_write accumulator."""
import ops
from rule_ops import AVX2, check_steps, kinds, steps_of
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.autotune.space.sketch.analysis import DagAnalysis
from einloop.autotune.space.sketch.rules import fires_tiling


def test_which_stages_are_tiled():
    for name, tiled in [("gemm", ["C"]), ("batch_matmul", ["C"]), ("conv2d", ["Out"]),
                        ("depthwise_conv", ["Out"]), ("softmax", []), ("max_pool", []),
                        ("layer_norm", [])]:
        an = DagAnalysis(getattr(ops, name)()[1], AVX2)
        assert [f.name for f in fires_tiling(an)] == tiled, name


def test_gemm_knobs_and_level2_steps():
    ins, outs, ref = ops.gemm(32, 48, 24)
    sp = generate_space(outs, AVX2)
    assert RuleKind.MULTI_LEVEL_TILING in sp.fired["C"]
    knobs = sp.config_space.knobs
    assert {"C.tile.i", "C.tile.j", "C.tile.k", "C.cache", "C.unroll"} <= set(knobs)
    assert all(len(e.size) == 4 for e in knobs["C.tile.i"].entities)
    assert all(len(e.size) == 2 for e in knobs["C.tile.k"].entities)
    steps = steps_of(sp, C__tile__i=(-1, 2, 2, 4), C__tile__j=(-1, 1, 3, 16),
                     C__tile__k=(-1, 4), C__cache=2, C__unroll=64, C__pack__B=0)
    assert kinds(steps, "C") == ["cache_write"] + ["split"] * 6 + ["reorder", "fuse", "parallel",
                                                                   "vectorize"]
    local = [st for st in steps if st.stage == "C.local"]
    assert [st.kind.value for st in local] == ["split", "split", "split", "reorder", "vectorize",
                                               "unroll", "unroll", "unroll", "compute_at"]
    assert local[3].args["axes"] == ("k.outer", "i.outer", "j.outer", "k.inner", "i.inner",
                                     "j.inner")
    assert dict(local[-1].args) == {"parent": "C", "axis": "j.inner.outer"}   # end of S1
    # unroll step 64: i.inner (4) x k.inner (4) x j.outer (3) = 48; i.outer would make 96
    assert [st.args["axis"] for st in local if st.kind.value == "unroll"] == [
        "i.inner", "k.inner", "j.outer"]
    check_steps(steps, ins, outs, ref)


def test_level1_and_untiled_accumulator():
    ins, outs, ref = ops.gemm(32, 48, 24)
    sp = generate_space(outs, AVX2)
    lvl1 = steps_of(sp, C__cache=1)
    at = [st for st in lvl1 if st.kind.value == "compute_at"][0]
    assert at.args["axis"].endswith("fused")                              # the S0 loop
    check_steps(lvl1, ins, outs, ref)
    lvl0 = steps_of(sp, C__cache=0)
    assert "cache_write" not in kinds(lvl0) and "compute_at" not in kinds(lvl0)
    check_steps(lvl0, ins, outs, ref)


def test_conv2d_tiles_every_axis_and_reduction():
    ins, outs, ref = ops.conv2d()
    sp = generate_space(outs, AVX2)
    names = set(sp.config_space.knobs)
    assert {"Out.tile.k", "Out.tile.y", "Out.tile.x", "Out.tile.c", "Out.tile.r",
            "Out.tile.s"} <= names
    assert "Out.tile.n" not in names                      # extent 1: nothing to tile
    for c in range(0, len(sp.config_space), max(1, len(sp.config_space) // 5)):
        check_steps(sp.steps(c), ins, outs, ref)


def test_tiles_too_few_for_the_cores_fuse_level_one_into_the_parallel_loop():
    """A level-0 tile of one iteration would leave the stage serial: level 1 joins the parallel
    loop instead (any tile choice of the search still uses every core)."""
    ins, outs, ref = ops.gemm(32, 48, 24)
    sp = generate_space(outs, AVX2)
    for cache in (2, 1, 0):
        steps = steps_of(sp, C__tile__i=(-1, 32, 1, 1), C__tile__j=(-1, 3, 1, 16), C__cache=cache)
        fused = [st.args["inner"] for st in steps if st.stage == "C" and st.kind.value == "fuse"]
        assert fused == ["j.outer", "i.inner.outer", "j.inner.outer"], (cache, fused)
        par = [st.args["axis"] for st in steps if st.stage == "C" and st.kind.value == "parallel"]
        assert par == ["i.outer.j.outer.fused.i.inner.outer.fused.j.inner.outer.fused"], par
        check_steps(steps, ins, outs, ref)


def test_a_vector_axis_tile_is_whole_vectors_or_whole_vectors_and_a_half():
    """A row of 56 on 16 lanes may be one tile of 3.5 vectors (codegen: 32 + 16 + 8 lanes),
    never 28 (16 + 8 + 4) or another fraction; 8 lanes take 28 (3.5 vectors) too."""
    from einloop.autotune.space.sketch.tiles import split_sizes
    inner16 = {c[-1] for c in split_sizes(56, 4, vector_lanes=16)}
    assert 56 in inner16 and 28 not in inner16 and 14 not in inner16
    assert all(t == 1 or t % 16 == 0 or (t > 16 and t % 8 == 0) for t in inner16)
    inner8 = {c[-1] for c in split_sizes(56, 4, vector_lanes=8)}
    assert {8, 28, 56} <= inner8 and 14 not in inner8 and 4 not in inner8
