"""A case: the plain-data description of one operator and one schedule, made from a seed."""
from __future__ import annotations

import random

from .gen_ops import LANG_RATE, generate_ops
from .gen_schedules import generate_schedule


#: targets for the scheduled build; x86-64 has no F16C and no FMA (the baseline code paths)
TARGETS = ("llvm",) * 6 + ("llvm -mcpu=x86-64", "llvm -mcpu=haswell")


def make_case(seed, lang_rate=LANG_RATE):
    """The case of *seed*: JSON-able, replayable, and the unit the shrinker reduces
    (*lang_rate*: how many stages are newer constructs, see gen_lang; a campaign aimed at them
    raises it, and replays a case by seed with the same rate)."""
    case = generate_ops(seed, lang_rate)
    case["schedule"], sched_features = generate_schedule(case, seed)
    case["seed"] = seed
    case["target"] = random.Random(seed).choice(TARGETS)
    case["features"] = sorted(set(case["features"]) | set(sched_features))
    return case
