"""Templates for the measurement tests, in a module of their own so that the build
workers can import them by name (the task pickles this module's name).

``measure_test_gemm`` is ``C[i, j] = sum_k (A[i, k] + add) * B[k, j]`` with knobs:

* ``tile_i``, ``tile_j``: splits of the two output axes (the valid search space);
* ``add``: 0.0 (correct) or 1.0, which really changes the computed values (a wrong answer);
* ``mode``: ``ok``; ``bad_schedule`` (splits an axis that is already split: ScheduleError while
  instantiating); ``slow_run`` (an extra reduction of 2**30 steps per row whose contribution is
  ~1e-21: correct, but takes many seconds to run); ``slow_build`` (the template sleeps: the build
  overruns its timeout); ``crash_build`` (the template segfaults its build worker process).
"""
import ctypes
import sys
import time

from einloop import te, create_schedule
from einloop.autotune.task.context import get_config
from einloop.autotune.space.knobs import ConfigSpace
from einloop.autotune.task.template import template

N = 32
SLOW_STEPS = 1 << 30
MODES = ["ok", "bad_schedule", "slow_run", "slow_build", "crash_build"]


@template("measure_test_gemm")
def gemm(n=N):
    cfg = get_config()
    cfg.define_split("tile_i", n, num_outputs=2, max_factor=16)
    cfg.define_split("tile_j", n, num_outputs=2, max_factor=16)
    cfg.define_knob("add", [0.0, 1.0], default=0.0)
    cfg.define_knob("mode", MODES, default="ok")
    mode, add = cfg["mode"].val, cfg["add"].val
    if mode == "slow_build":
        time.sleep(3600)
    if mode == "crash_build":
        ctypes.string_at(0)
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    if mode == "slow_run":
        r = te.reduce_axis((0, SLOW_STEPS), name="r")
        D = te.compute((n,), lambda i: te.sum(A[i, r % n] * 1e-30, axis=r), name="D")
        C = te.compute((n, n), lambda i, j: te.sum((A[i, k] + add + D[i]) * B[k, j], axis=k),
                       name="C")
    else:
        C = te.compute((n, n), lambda i, j: te.sum((A[i, k] + add) * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    i, j = s[C].op.axis
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, k, ii, ji)
    if mode == "bad_schedule":
        s[C].split(i, factor=2)             # i was split already: ScheduleError
    return s, [A, B, C]


@template("measure_test_broken")
def broken(n=16):
    """Every concrete config (the fallback included) fails to instantiate; collecting the space
    (the ConfigSpace is the config then) works."""
    cfg = get_config()
    cfg.define_knob("x", [1, 2])
    collecting = isinstance(cfg, ConfigSpace)
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 2.0, name="C")
    s = create_schedule(C)
    (i,) = s[C].op.axis
    s[C].split(i, factor=4)
    if not collecting:
        s[C].split(i, factor=2)             # i was split already: ScheduleError
    return s, [A, C]


def config_index(task, **choices):
    """Index of the config with the given knob values (JSON form); other knobs at default."""
    space = task.config_space
    point = []
    for name, knob in space.knobs.items():
        point.append(knob.index_of(choices.pop(name)) if name in choices else knob.default_index)
    assert not choices, f"unknown knobs {choices}"
    return space.index_of(point)


# builds that fail in the worker process in ways other than an einloop error ---------------------
BUILD_FAULTS = ["none", "sleep", "busy", "zero_division", "memory", "recursion", "exit"]


def _recurse(n):
    return _recurse(n + 1) + 1


@template("measure_test_build_faults")
def build_faults(n=16):
    """``fault`` picks what instantiating the config really does in the build worker: nothing,
    sleep for an hour, compute for an hour without releasing the GIL (``sum`` over a huge range,
    in C), divide by zero, allocate 4 EiB, recurse without end, or call ``sys.exit``."""
    cfg = get_config()
    cfg.define_knob("fault", BUILD_FAULTS, default="none")
    fault = cfg["fault"].val
    if fault == "sleep":
        time.sleep(3600)
    elif fault == "busy":
        sum(range(1 << 62))
    elif fault == "zero_division":
        n = n // 0
    elif fault == "memory":
        bytearray(1 << 62)
    elif fault == "recursion":
        _recurse(0)
    elif fault == "exit":
        sys.exit(3)
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] + 1.0, name="C")
    return create_schedule(C), [A, C]
