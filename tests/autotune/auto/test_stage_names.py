"""Every stage of a task has knobs of its own: stages whose operations share a name (the ten
``reshape`` views and two ``matmul`` products of an attention kernel lowered from PyTorch) get
suffixed names (``matmul_1``), while a DAG whose names are unique keeps its knob names exactly
(tuning logs written before keep replaying)."""
from types import SimpleNamespace

import ops
import pytest
from rule_ops import AVX2, check_steps, gemm_relu

from einloop import nn, te
from einloop.autotune.space.sketch import generate_space
from einloop.autotune.space.sketch.knob_names import stage_names
from einloop.autotune.space.sketch.plan import knob_values, plan_of
from einloop.autotune.space.sketch.seeds import config_from, seed_configs


def test_a_repeated_name_is_suffixed_past_the_names_taken():
    a, b, c, d = (SimpleNamespace(name=n) for n in ("mm", "mm", "mm_1", "mm"))
    got = stage_names([a, b, c, d])
    assert [got[id(x)] for x in (a, b, c, d)] == ["mm", "mm_2", "mm_1", "mm_3"]


def two_products(M=16, N=24, K=12, P=8):
    """(A @ B) @ E, both products named ``mm``."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    E = te.placeholder((N, P), name="E")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="mm")
    n = te.reduce_axis((0, N), name="k")
    D = te.compute((M, P), lambda i, j: te.sum(C[i, n] * E[n, j], axis=n), name="mm")
    return [A, B, E], [D], lambda a, b, e: [a @ b @ e]


def test_two_stages_of_one_name_get_two_sets_of_knobs():
    ins, outs, ref = two_products()
    sp = generate_space(outs, AVX2)
    an = sp.analysis
    assert [f.name for f in an.stages()] == ["mm", "mm_1"]
    knobs = sp.config_space.knobs
    for kind in ("tile.i", "tile.j", "tile.k", "cache", "unroll"):
        assert f"mm.{kind}" in knobs and f"mm_1.{kind}" in knobs
    # each product's tile knob is over its own extent (24 columns, then 8)
    sizes = [[e.size for e in knobs[f"{s}.tile.j"].entities] for s in ("mm", "mm_1")]
    assert sizes[0] != sizes[1]
    assert set(sp.fired) == {"mm", "mm_1"}
    assert "  mm_1 " in sp.describe() and "  mm " in sp.describe()
    cfg = config_from(sp, {"mm.tile.j": (-1, 1, 1, 8), "mm.cache": 1,
                           "mm_1.tile.j": (-1, 1, 1, 4), "mm_1.cache": 2})
    plan = {p.facts.name: p for p in plan_of(an, knob_values(cfg), sp.rfactor_ok)}
    assert (plan["mm"].cache_level, plan["mm_1"].cache_level) == (1, 2)
    assert plan["mm"].spatial_tiles[1][-1] == 8 and plan["mm_1"].spatial_tiles[1][-1] == 4
    check_steps(sp.steps(cfg), ins, outs, ref)


S, B, H, D = 24, 2, 2, 16          # sequence, batch, heads, head size


def attention_of_views_named_alike():
    """Attention over ``qkv`` [3, S, B, H*D] as the PyTorch backend declares it: every view of
    Q, K and V named ``view``, both products ``matmul``."""
    qkv = te.placeholder((3, S, B, H * D), name="qkv")

    def heads(which):
        x = nn.squeeze(nn.slice_axis(qkv, 0, which, which + 1, name="view"), 0, name="view")
        return nn.permute(nn.reshape(x, (S, B * H, D), name="view"), (1, 0, 2), name="view")
    q, k, v = (heads(n) for n in range(3))
    scores = nn.matmul(q, nn.permute(k, (0, 2, 1), name="view"), name="matmul")
    return [qkv, nn.matmul(nn.softmax(scores, -1), v, name="matmul")]


def test_views_of_one_name_are_inlined_or_kept_each_on_its_own():
    """The first seed inlines a chain of views into its last view but keeps that one a copy:
    with one ``view.inline`` knob for all of them it could only do both or neither."""
    tensors = attention_of_views_named_alike()
    sp = generate_space(tensors[-1:], AVX2)
    # the describe() names the product a view may be computed at by its stage name
    assert "may be computed at matmul_1" in sp.describe()
    inline = sorted(k for k in sp.config_space.knobs if k.endswith(".inline"))
    assert len(inline) >= 10
    assert all(k.split(".")[0].startswith("view") for k in inline if "softmax" not in k)
    first = knob_values(seed_configs(sp, 1)[0])
    views = {first[k] for k in inline if k.startswith("view")}
    assert views == {0, 1}


def test_unique_names_keep_their_knob_names_exactly():
    _, outs, _ = gemm_relu()
    assert list(generate_space(outs, AVX2).config_space.knobs) == [
        "C.tile.i", "C.tile.j", "C.tile.k", "C.cache", "C.unroll", "C.pack.A", "C.pack.B",
        "R.vec"]


@pytest.mark.parametrize("name", sorted(ops.ZOO))
def test_a_stage_of_a_unique_name_is_named_as_its_op(name):
    an = generate_space(ops.ZOO[name]()[1], AVX2).analysis
    compute = an.dag.compute_ops            # after the residue rules' rewrite, if any
    assert len({op.name for op in compute}) == len(compute)     # the zoo's names are unique
    assert [f.name for f in an.stages()] == [op.name for op in compute]
