"""The whole space on random operators: every config computes what NumPy computes; the default
schedule equals the unscheduled one; seeds are distinct valid configs."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ops
from rule_ops import AVX2, check_steps
from einloop import create_schedule
from einloop.autotune.space.sketch.apply import plain_rows_stages
from einloop.autotune.space.sketch import SketchSpace, generate_space
from einloop.autotune.space.knobs import ConfigSpace
from oracle import random_inputs, run
from test_property_schedules import OPERATORS

ZOO_EXTRA = {"batch_matmul": lambda d: ops.batch_matmul(d.draw(st.integers(1, 3)),
                                                        d.draw(st.integers(1, 12)),
                                                        d.draw(st.integers(1, 20)),
                                                        d.draw(st.integers(1, 9))),
             "depthwise": lambda d: ops.depthwise_conv(d.draw(st.integers(1, 4)),
                                                       d.draw(st.integers(3, 9)),
                                                       d.draw(st.integers(3, 20))),
             "max_pool": lambda d: ops.max_pool(d.draw(st.integers(1, 3)),
                                                d.draw(st.integers(4, 9)),
                                                d.draw(st.integers(4, 9)))}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_configs_of_random_operators_match_numpy(data):
    table = {**OPERATORS, **ZOO_EXTRA}
    name = data.draw(st.sampled_from(sorted(table)))
    ins, outs, ref = table[name](data)
    sp = generate_space(outs, AVX2)
    index = data.draw(st.integers(0, len(sp.config_space) - 1))
    check_steps(sp.steps(index), ins, outs, ref, rtol=1e-3)


@pytest.mark.parametrize("name", sorted(ops.ZOO))
def test_default_steps_equal_the_unscheduled_schedule(name):
    ins, outs, ref = ops.ZOO[name]()
    sp = generate_space(outs, AVX2)
    arrays = random_inputs(ins, positive=True)
    got = run(create_schedule(outs).apply_steps(sp.default_steps()), ins, outs, arrays)
    want = run(create_schedule(outs), ins, outs, arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    kinds = {st.kind.value for st in sp.default_steps()}
    # no tiling, no accumulator, no packing; a product of rows (X @ W.T) reduced in vector
    # lanes is the one rfactor, computed at its stage's row loop
    s = create_schedule(outs)
    for f in sp.plain_analysis.stages():
        if sp.plain_analysis.dag.is_inlinable(f.op):
            s[f.op].compute_inline()
    rows = bool(plain_rows_stages(s, sp.plain_analysis))
    assert "parallel" in kinds and not kinds & {"cache_write", "pack"}
    assert bool(kinds & {"rfactor"}) == rows


@pytest.mark.parametrize("name", ["gemm", "conv2d", "softmax", "layer_norm"])
def test_seed_configs_are_distinct_and_correct(name):
    ins, outs, ref = ops.ZOO[name]()
    sp = generate_space(outs, AVX2)
    seeds = sp.seed_configs(5)
    assert 1 <= len(seeds) <= 5 and len({c.index for c in seeds}) == len(seeds)
    for c in seeds:
        check_steps(sp.steps(c), ins, outs, ref)


def test_interface():
    ins, outs, _ = ops.gemm()
    sp = generate_space(outs[0], AVX2)
    assert isinstance(sp, SketchSpace) and isinstance(sp.config_space, ConfigSpace)
    steps = sp.steps(sp.config_space.get(3))
    assert isinstance(steps, tuple) and steps == sp.steps(3)       # deterministic
    assert create_schedule(outs).apply_steps(steps).steps == list(steps)   # replays as recorded
