"""The XGBoost tuner gives part of each plan to the best measured config's neighbours.

Its model judges a few-choice knob (a stage's compute location, an inline, a pack) by the few
configs that made each choice, mostly random ones with poor tiles, so a choice that suits the
best tiles can score too low to be planned ever.  So after the first measurements each plan
holds NEIGHBOUR_SHARE of configs that are the best one with one few-choice knob changed.
"""
import random

import ops
from einloop.autotune.measure.common import MeasureErrorNo, MeasureResult
from einloop.autotune.search import xgb_tuner
from einloop.autotune.search.xgb_tuner import XGBTuner
from einloop.autotune.task.auto import AutoTask

TARGET = "llvm -mcpu=haswell"           # an explicit machine: AVX2, the sketch's choices fixed


def _conv_task():
    """A padded conv2d: its padding stage's location (Out.at) is a few-choice knob."""
    ins, outs, _ = ops.conv2d(C=8, H=18, W=18, K=16, stride=1)
    return AutoTask.of_tensors(ins + outs, TARGET, cores=2)


def _result(seconds):
    return MeasureResult((seconds,), MeasureErrorNo.NO_ERROR, "", seconds, 0.0)


def _one_knob_away(space, a, b):
    """The knob in which configs *a* and *b* differ, if they differ in exactly one."""
    pa, pb = space.point_of(a), space.point_of(b)
    differ = [k for k, (x, y) in enumerate(zip(pa, pb)) if x != y]
    return differ[0] if len(differ) == 1 else None


def test_a_plan_holds_the_best_configs_few_choice_neighbours():
    task = _conv_task()
    tuner = XGBTuner(task, plan_size=16, population=32, generations=1, seed=0)
    space = tuner.space
    assert "Out.at" in space.knobs                  # the padding's location is a knob
    rng = random.Random(0)
    configs = [space.get(rng.randrange(space.size)) for _ in range(12)]
    costs = [1e-3 * (2 + i) for i in range(12)]
    costs[5] = 1e-4                                 # the best, by far
    tuner._record(configs, [_result(c) for c in costs])
    tuner.update(configs, [_result(c) for c in costs])
    best = configs[5].index
    assert tuner.best_config.index == best

    plan = tuner._make_plan()
    assert len(plan) == 16 and not set(plan) & tuner.visited
    knobs = [_one_knob_away(space, best, idx) for idx in plan]
    near = [k for k in knobs if k is not None and space.dims[k] <= xgb_tuner.NEIGHBOUR_MAX_CHOICES]
    assert len(near) >= round(16 * xgb_tuner.NEIGHBOUR_SHARE), (knobs, space.dims)

    # every few-choice neighbour is offered, once, and no visited config
    every = tuner._neighbours()
    few = [k for k, d in enumerate(space.dims) if d <= xgb_tuner.NEIGHBOUR_MAX_CHOICES]
    assert len(every) == len(set(every)) == sum(space.dims[k] - 1 for k in few)
    tuner.visited.add(every[0])
    assert every[0] not in tuner._neighbours()


def test_no_neighbours_before_anything_was_measured():
    tuner = XGBTuner(_conv_task(), plan_size=8, population=16, generations=1, seed=0)
    assert tuner._neighbours() == []
    assert len(tuner._make_plan()) == 8
