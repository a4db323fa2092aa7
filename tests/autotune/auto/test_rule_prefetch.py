"""Rule 6's prefetch: a root stage that is not tiled may prefetch, at the top of each iteration of
its parallel loop, what the next iteration reads of its inputs (the stages computed inside the
loop included); on by default, searched, and every config computes what NumPy does."""
import random
import re

import numpy as np
import pytest

import ops
from rule_ops import AVX2, check_steps, kinds, steps_of
from einloop import create_schedule, lower
from einloop.autotune.space.sketch import generate_space
from einloop.autotune.space.sketch.rules import PREFETCH_DISTANCES


def lowered(sp, ins, outs, config):
    s = create_schedule(outs).apply_steps(sp.steps(config))
    return str(lower(s, ins + outs))


def test_softmax_prefetches_its_next_row_by_default():
    ins, outs, ref = ops.softmax(256, 320)                 # X: 320 KiB
    sp = generate_space(outs, AVX2)
    assert sp.config_space.knobs["Out.prefetch"].entities[0].val == PREFETCH_DISTANCES[0] == 1
    seed = sp.seed_configs(1)[0]
    assert seed["Out.prefetch"].val == 1
    steps = sp.steps(seed)
    assert kinds(steps, "Out").count("prefetch") == 1
    text = lowered(sp, ins, outs, seed)
    assert re.findall(r"prefetch X\[.*\]", text) == ["prefetch X[i * 320 + 320:+320]"]
    check_steps(steps, ins, outs, ref)
    off = steps_of(sp, Out__prefetch=0)
    assert "prefetch" not in kinds(off)
    check_steps(off, ins, outs, ref)


def test_a_tiled_stage_has_no_prefetch_knob():
    """A GEMM's parallel tile reads a panel far larger than a prefetch keeps: no knob."""
    ins, outs, ref = ops.gemm(64, 64, 64)
    sp = generate_space(outs, AVX2)
    assert not any(name.endswith(".prefetch") for name in sp.config_space.knobs)


def test_a_small_operator_has_no_prefetch_knob():
    """Inputs below PREFETCH_MIN_BYTES are most likely still in cache: no knob to search."""
    ins, outs, ref = ops.softmax(64, 96)                   # X: 24 KiB
    assert not any(name.endswith(".prefetch")
                   for name in generate_space(outs, AVX2).config_space.knobs)


@pytest.mark.parametrize("op, sizes", [("softmax", (200, 333)), ("layer_norm", (170, 401)),
                                       ("elementwise_chain", (300, 230)),
                                       ("multi_axis_reduce", (33, 40, 50, 2))])
def test_sampled_configs_with_and_without_prefetch_compute_the_same(op, sizes):
    ins, outs, ref = getattr(ops, op)(*sizes)
    sp = generate_space(outs, AVX2)
    cs = sp.config_space
    assert any(name.endswith(".prefetch") for name in cs.knobs)
    rng = random.Random(7)
    prefetched = 0
    for index in rng.sample(range(len(cs)), min(12, len(cs))):
        steps = sp.steps(cs.get(index))
        prefetched += "prefetch" in kinds(steps)
        check_steps(steps, ins, outs, ref)
    assert prefetched > 0
