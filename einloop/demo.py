"""The Quick start's main job: tune a custom operator, then deploy the tuned schedule.

A dense layer, ``relu(X @ W + bias)``, is declared as a tunable template (packed weights, a
register-blocked tile whose shape the tuner picks, bias and ReLU fused into the write-back).  The
default tuner (XGBoost cost model + genetic search) measures real candidates and logs them to
``tuning_logs/dense_relu.jsonl``; then, as at deploy time, the best config is read back from the
log (no tuning), built, checked against NumPy, and timed against the untuned fallback schedule
and NumPy.
"""
import os
import warnings

import numpy as np

from . import autotune, te
from .codegen.build import build
from .schedule import create_schedule
from .runtime import time_callable, warm_allocator

LOG = os.path.join(autotune.record.DEFAULT_DIR, "dense_relu.jsonl")


@autotune.template("dense_relu")
def dense_relu(M, N, K):
    """relu(X @ W + bias) with a tunable tile: panel width, tile rows, k unrolling."""
    cfg = autotune.get_config()
    cfg.define_split("tile_n", N, num_outputs=2, policy="factors",
                     filter=lambda e: 16 <= e.size[-1] <= 128 and e.size[-1] % 16 == 0)
    cfg.define_split("tile_m", M, num_outputs=2, candidate=[[-1, m] for m in range(1, 13)])
    cfg.define_split("tile_k", K, num_outputs=2, policy="power2", max_factor=8)
    cfg.define_knob("parallel_panels", [False, True])
    bn = cfg["tile_n"].size[-1]
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((K, N), name="W")
    bias = te.placeholder((N,), name="bias")
    WP = te.compute((N // bn, K, bn), lambda x, y, z: W[y, x * bn + z], name="WP")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(X[i, k] * WP[j // bn, k, j % bn], axis=k),
                   name="Y")
    Out = te.compute((M, N), lambda i, j: te.maximum(Y[i, j] + bias[j], 0.0), name="Out")

    s = create_schedule(Out)
    i, j = s[Out].op.axis
    io, ii = cfg["tile_m"].apply(s, Out, i)
    jo, ji = cfg["tile_n"].apply(s, Out, j)
    if cfg["parallel_panels"].val:
        s[Out].reorder(jo, io, ii, ji)
        s[Out].parallel(jo)
        s[Y].compute_at(s[Out], io)
    else:
        s[Out].reorder(io, jo, ii, ji)
        s[Out].parallel(io)
        s[Y].compute_at(s[Out], jo)
    s[Out].vectorize(ji)
    yi, yj = s[Y].op.axis
    ko, ki = cfg["tile_k"].apply(s, Y, s[Y].op.reduce_axis[0])
    s[Y].reorder(ko, ki, yi, yj)
    s[Y].unroll(ki)
    s[Y].unroll(yi)
    s[Y].vectorize(yj)
    x, _, z = s[WP].op.axis
    s[WP].vectorize(z)
    s[WP].parallel(x)
    return s, [X, W, bias, Out]


def _median_time(fn):
    return time_callable(fn, number=10, repeat=5).median


def main(size=512, trials=48):
    warm_allocator()            # before NumPy is timed as a peer (see its docstring)
    M = N = K = size
    task = autotune.create_task("dense_relu", (M, N, K))
    print(f"einloop demo: relu(X @ W + bias), {M}x{K} @ {K}x{N}, float32")
    print(f"{task.config_space}\n")

    tuner = autotune.XGBTuner(task, seed=0)
    tuner.tune(trials, measure_option=autotune.measure_option(number=5, repeat=3, timeout=10),
               callbacks=[autotune.log_to_file(LOG)])
    print(f"tuned: best {tuner.best_gflops:.1f} GFLOP/s, {tuner.best_config} (log: {LOG})\n")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    out = np.empty((M, N), np.float32)
    expect = np.maximum(x @ w + b, 0)

    with autotune.apply_history_best(LOG):             # deploy: read the log, no tuning
        s, args = dense_relu(M, N, K)
    print("deployed schedule (the best config of the log):\n" + str(s) + "\n")
    tuned = build(s, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.FallbackConfigWarning)
        untuned = build(*dense_relu(M, N, K))          # the template's fallback config

    flops = 2 * M * N * K
    rows = [("numpy", _median_time(lambda: np.maximum(x @ w + b, 0)))]
    for name, f in (("einloop untuned (fallback)", untuned), ("einloop tuned (from log)", tuned)):
        out.fill(np.nan)
        f(x, w, b, out)
        np.testing.assert_allclose(out, expect, rtol=1e-3, atol=1e-3)
        rows.append((name, _median_time(lambda: f(x, w, b, out))))
    base = rows[0][1]
    print(f"{'variant':<28}{'time ms':>10}{'GFLOP/s':>10}{'vs numpy':>10}")
    for name, t in rows:
        print(f"{name:<28}{t * 1e3:10.3f}{flops / t / 1e9:10.1f}{base / t:9.2f}x")
    print(f"\ntuned vs untuned: {rows[1][1] / rows[2][1]:.2f}x faster; all results match NumPy")
    return 0


if __name__ == "__main__":
    main()
