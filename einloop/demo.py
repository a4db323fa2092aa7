"""The Quick start's main job: auto-schedule a custom operator, then deploy it from the log.

A dense layer, ``relu(X @ W + bias)``, is declared in a few lines below, with no template and no
schedule.  ``autotune.auto_schedule`` derives a schedule space from the operator's stages (tiling
of the matmul, bias and ReLU fused into its tile, packing of W, parallel and vector loops), and
the default tuner (XGBoost cost model + genetic search) measures real candidates and logs them to
``tuning_logs/dense_relu.jsonl``.  Then, as at deploy time, the best schedule is read back from
the log (no tuning), built, checked against NumPy, and timed against the untuned schedule (the
space's safe default: parallel and vectorized, no tiling) and NumPy.  A rerun resumes from the
log instead of measuring again.
"""
import os
import statistics
import time

import numpy as np

from . import autotune, te
from .autotune.log.record import DEFAULT_DIR
from .autotune.space.sketch import generate_space
from .codegen.build import build
from .errors import TuningError
from .schedule.replay import replay
from .runtime import time_settled, warm_allocator

LOG = os.path.join(DEFAULT_DIR, "dense_relu.jsonl")


def dense_relu(M, N, K):
    """relu(X @ W + bias): the whole declaration; returns [X, W, bias, Out]."""
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((K, N), name="W")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="Y")
    Out = te.compute((M, N), lambda i, j: te.maximum(Y[i, j] + bias[j], 0.0), name="Out")
    return [X, W, bias, Out]


def _records(log):
    return len(autotune.load_log(log)) if os.path.exists(log) else 0


def _valid_records_of(tensors, log):
    """How many records of *log* measured this operator (by its DAG's workload key) validly."""
    if not os.path.exists(log):
        return 0
    from .autotune.task.auto import AutoTask
    key = AutoTask.of_tensors(tensors).workload_key
    return sum(r.workload == key and r.error_no is autotune.MeasureErrorNo.NO_ERROR
               for r in autotune.load_log(log))


def _interleaved_times(fns, rounds=3):
    """Median seconds per call of each of *fns*, timed settled in interleaved rounds (the
    machine is shared and noisy: each round gives every variant the same conditions)."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for got, fn in zip(times, fns):
            got.append(time_settled(fn, number=10, repeat=5).median)
    return [statistics.median(t) for t in times]


def main(size=512, trials=48, log=LOG):
    """Tune *trials* candidates (0: none, deploy what *log* already holds), deploy, compare."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise TuningError(f"demo: --trials must be a whole number >= 0 (0 deploys from the log "
                          f"without tuning), got {trials!r}")
    M = N = K = size
    if trials == 0 and not _valid_records_of(dense_relu(M, N, K), log):
        raise TuningError(f"demo --trials 0: nothing to deploy: {log} holds no measured schedule "
                          f"of relu(X @ W + bias) at size {size}; run the demo with --trials N "
                          f"(N > 0) first to tune it (or pass the --size it was tuned at)")
    warm_allocator()            # before NumPy is timed as a peer (see its docstring)
    print(f"einloop demo: relu(X @ W + bias), {M}x{K} @ {K}x{N}, float32, auto-scheduled "
          "(no template)")
    print(generate_space([dense_relu(M, N, K)[-1]]).describe() + "\n")

    if trials == 0:
        print(f"no tuning (--trials 0): {_valid_records_of(dense_relu(M, N, K), log)} measured "
              f"schedules of this operator in {log}\n")
    else:
        before, t0 = _records(log), time.time()
        autotune.auto_schedule(dense_relu(M, N, K), n_trial=trials, log=log)
        print(f"tuned: {_records(log) - before} candidates measured in {time.time() - t0:.1f} s, "
              f"up to {trials} in all (log: {log}; a rerun resumes from it)\n")

    with autotune.apply_history_best(log):          # deploy: read the log, no tuning
        s, args = autotune.auto_schedule(dense_relu(M, N, K))
    print("deployed schedule (the best of the log):\n" + str(s) + "\n")
    tuned = build(s, args)
    fresh = dense_relu(M, N, K)
    untuned = build(replay(generate_space([fresh[-1]]).default_steps(), [fresh[-1]]), fresh)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    out = np.empty((M, N), np.float32)
    expect = np.maximum(x @ w + b, 0)

    flops = 2 * M * N * K
    variants = [("einloop untuned (default)", untuned), ("einloop tuned (from log)", tuned)]
    for name, f in variants:
        out.fill(np.nan)
        f(x, w, b, out)
        np.testing.assert_allclose(out, expect, rtol=1e-3, atol=1e-3)
    fns = [lambda: np.maximum(x @ w + b, 0)] + [lambda f=f: f(x, w, b, out) for _, f in variants]
    rows = list(zip(["numpy"] + [name for name, _ in variants], _interleaved_times(fns)))
    base = rows[0][1]
    print(f"{'variant':<28}{'time ms':>10}{'GFLOP/s':>10}{'vs numpy':>10}")
    for name, t in rows:
        print(f"{name:<28}{t * 1e3:10.3f}{flops / t / 1e9:10.1f}{base / t:9.2f}x")
    print(f"\ntuned vs untuned: {rows[1][1] / rows[2][1]:.2f}x faster; all results match NumPy")
    print(f"the best schedule as code: einloop log {log} --code")
    return 0


if __name__ == "__main__":
    main()
