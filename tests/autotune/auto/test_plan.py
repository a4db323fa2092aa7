"""The rules' registry and knob names, and a config read into per-stage plans."""
import ops
import pytest
from rule_ops import AVX2, check_steps, gemm_relu
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.autotune.space.sketch.plan import knob_values, plan_of
from einloop.autotune.space.sketch.rules import (PACK_NONE, PACK_ROOT, PER_PART, PRELUDE_RULES,
                                                 RULES, KnobKind, knob_name)
from einloop.autotune.space.sketch.seeds import config_from
from einloop.errors import InternalError


def test_every_rule_kind_is_registered_once_in_order():
    assert [r.kind for r in RULES] == [k for k in RuleKind if k not in PRELUDE_RULES]
    assert list(RuleKind)[:len(PRELUDE_RULES)] == list(PRELUDE_RULES)     # they come first


def spellings(an):
    """Every name knob_name gives to the stages of *an* (tiles per axis, packs per operand)."""
    out = set()
    for f in an.stages():
        for kind in KnobKind:
            if kind is KnobKind.TILE:
                out |= {knob_name(kind, f, iv) for iv in f.spatial + f.reduce}
            elif kind is KnobKind.PACK:
                out |= {knob_name(kind, f, src) for src, _, _ in f.packable}
            else:
                out.add(knob_name(kind, f))
    return out


@pytest.mark.parametrize("name", sorted(ops.ZOO))
def test_every_knob_is_spelled_by_knob_name(name):
    sp = generate_space(ops.ZOO[name]()[1], AVX2)
    assert set(sp.config_space.knobs) <= spellings(sp.analysis)


def test_knob_name_spells_and_checks_its_part():
    ins, outs, _ = ops.gemm()
    an = generate_space(outs, AVX2).analysis
    (f,) = an.stages()
    assert knob_name(KnobKind.CACHE, f) == knob_name(KnobKind.CACHE, "C") == "C.cache"
    with pytest.raises(InternalError, match="stage facts"):
        knob_name(KnobKind.CACHE, f.op)             # an op's own name may be another stage's
    assert knob_name(KnobKind.TILE, "C", f.reduce[0]) == "C.tile.k"
    assert knob_name(KnobKind.PACK, f, ins[1].op) == "C.pack.B"
    for kind in KnobKind:
        with pytest.raises(InternalError):
            knob_name(kind, f, *(() if kind in PER_PART else (f.spatial[0],)))


def test_a_config_is_read_into_the_plans_of_its_stages():
    ins, outs, ref = gemm_relu(M=16, N=24, K=12)
    sp = generate_space(outs, AVX2)
    cfg = config_from(sp, {"C.cache": 1, "C.unroll": 16, "C.tile.i": (-1, 1, 2, 4),
                           "C.tile.k": (-1, 3), "C.pack.B": PACK_ROOT})
    plan = plan_of(sp.analysis, knob_values(cfg), sp.rfactor_ok)
    by_name = {p.facts.name: p for p in plan}
    c, t, r = by_name["C"], by_name["T"], by_name["R"]
    assert c.tiled and not c.as_rows and not c.inline
    assert (c.cache_level, c.unroll) == (1, 16)
    packs = {src.name: mode for (src, _, _), mode in zip(c.facts.packable, c.packs)}
    assert packs == {"A": PACK_NONE, "B": PACK_ROOT}
    assert c.spatial_tiles[0] == (2, 1, 2, 4)            # the outermost extent derived
    assert c.reduce_tiles == ((4, 3),)
    assert t.inline and not t.tiled and not r.tiled and not r.inline
    assert [p.hosts for p in plan] == [None] * 3          # nothing applied yet
    check_steps(sp.steps(cfg), ins, outs, ref)


def test_knobs_a_space_lacks_read_as_the_rule_not_firing():
    ins, outs, _ = ops.softmax()
    an = generate_space(outs, AVX2).analysis
    plan = plan_of(an, {})
    assert all(p.rfactor == "none" and not p.as_rows and not p.tiled and p.vec_mult == 1
               and p.at == "root" for p in plan)
