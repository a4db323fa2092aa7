"""A case: the plain-data description of one operator and one schedule, made from a seed."""
from __future__ import annotations

import random

from .gen_ops import generate_ops
from .gen_schedules import generate_schedule


#: targets for the scheduled build; x86-64 has no F16C and no FMA (the baseline code paths)
TARGETS = ("llvm",) * 6 + ("llvm -mcpu=x86-64", "llvm -mcpu=haswell")


def make_case(seed):
    """The case of *seed*: JSON-able, replayable, and the unit the shrinker reduces."""
    case = generate_ops(seed)
    case["schedule"], sched_features = generate_schedule(case, seed)
    case["seed"] = seed
    case["target"] = random.Random(seed).choice(TARGETS)
    case["features"] = sorted(set(case["features"]) | set(sched_features))
    return case
