"""Tuning benchmark: tune GEMM 1024^3 and conv2d, compare with NumPy; XGBTuner vs RandomTuner.

Everything printed is measured in this run, on this machine.  Run it with OpenBLAS's own kernel
choice (the Makefile's `bench-tune` target does):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_tune.py

Options: --trials (per tuning job, default 200), --budget (seconds per job, default 600),
--compare-trials (per run of the tuner comparison, default 64), --seeds (default 3).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import conv2d  # noqa: E402
import gemm  # noqa: E402
from common import setup_peers, versus  # noqa: E402
from einloop import autotune, build  # noqa: E402

OPTION = dict(number=5, repeat=3, timeout=10)


def tune_job(name, args, trials, budget, log, seed=0):
    task = autotune.create_task(name, args)
    tuner = autotune.XGBTuner(task, seed=seed)
    t0 = time.time()
    tuner.tune(trials, measure_option=autotune.measure_option(**OPTION),
               callbacks=[autotune.log_to_file(log)], time_budget_s=budget, quiet=False)
    return task, tuner, time.time() - t0


def deploy(template, args, log):
    with autotune.apply_history_best(log):
        s, targs = template(*args)
    return build(s, targs)


def bench_gemm(trials, budget, log):
    M = N = K = 1024
    task, tuner, wall = tune_job("gemm", (M, N, K), trials, budget, log)
    f = deploy(gemm.gemm_template, (M, N, K), log)
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    c = np.empty((M, N), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    t_np, t_ours, ratio = versus(lambda: np.matmul(a, b, out=c), lambda: f(a, b, c))
    return ("gemm 1024^3", len(tuner.history), wall, task.flop / t_ours / 1e9,
            task.flop / t_np / 1e9, ratio)


def bench_conv(trials, budget, log):
    shape = (1, 64, 56, 56, 64, 3, 3)
    task, tuner, wall = tune_job("conv2d", shape, trials, budget, log)
    f = deploy(conv2d.conv2d_template, shape, log)
    a = np.random.rand(1, 64, 56, 56).astype("float32")
    w = np.random.rand(64, 64, 3, 3).astype("float32")
    out = np.empty((1, 64, 56, 56), "float32")
    f(a, w, out)
    np.testing.assert_allclose(out, conv2d.reference(a, w), rtol=1e-3)
    t_np, t_ours, ratio = versus(lambda: conv2d.reference(a, w), lambda: f(a, w, out))
    return ("conv2d 64x56x56 k3", len(tuner.history), wall, task.flop / t_ours / 1e9,
            task.flop / t_np / 1e9, ratio)


def trials_to_reach(curve, target):
    for n, best in enumerate(curve, 1):
        if best >= target:
            return n
    return None


def best_curve(tuner):
    best, curve = 0.0, []
    for _, r in tuner.history:
        best = max(best, tuner.gflops_of(r))
        curve.append(best)
    return curve


def compare_tuners(trials, seeds, folder):
    task = autotune.create_task("gemm", (1024, 1024, 1024))
    curves = {}
    for kind, cls in (("xgb", autotune.XGBTuner), ("random", autotune.RandomTuner)):
        for seed in range(seeds):
            tuner = cls(task, seed=seed)
            tuner.tune(trials, measure_option=autotune.measure_option(**OPTION), quiet=True,
                       callbacks=[autotune.log_to_file(os.path.join(folder, f"{kind}{seed}.jsonl"))])
            curves[(kind, seed)] = best_curve(tuner)
            print(f"  {kind:<6} seed {seed}: best {curves[(kind, seed)][-1]:.1f} GFLOP/s", flush=True)
    overall = max(c[-1] for c in curves.values())
    print(f"\nXGBTuner vs RandomTuner on gemm 1024^3, {trials} trials x {seeds} seeds; trials "
          f"until the best-so-far reaches 90% of a target ({trials + 1} = not reached)")
    print(f"{'tuner':<8} {'final best':>11} {'to 90% of own best':>19} "
          f"{'to 90% of XGB best':>19} {'to 90% of best of all':>22}")
    for kind in ("xgb", "random"):
        runs = [curves[(kind, s)] for s in range(seeds)]
        cols = [[trials_to_reach(c, 0.9 * c[-1]) for c in runs],
                [trials_to_reach(c, 0.9 * curves[("xgb", s)][-1]) or trials + 1
                 for s, c in enumerate(runs)],
                [trials_to_reach(c, 0.9 * overall) or trials + 1 for c in runs]]
        med = [statistics.median(col) for col in cols]
        print(f"{kind:<8} {statistics.median(c[-1] for c in runs):>11.1f} {med[0]:>19} "
              f"{med[1]:>19} {med[2]:>22}   per seed: {cols}")
    print("(final best: median GFLOP/s over seeds; XGB best: the XGBTuner's final best of the "
          "same seed; best of all: over every run)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--budget", type=float, default=600)
    p.add_argument("--compare-trials", type=int, default=64)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--skip-compare", action="store_true")
    p.add_argument("--skip-main", action="store_true", help="only the tuner comparison")
    a = p.parse_args()
    limiter, threads, blas = setup_peers()
    print(f"einloop tuning benchmark: {threads} thread(s); {blas}")
    folder = tempfile.mkdtemp(prefix="einloop-bench-")
    if not a.skip_main:
        rows = [bench_gemm(a.trials, a.budget, os.path.join(folder, "gemm.jsonl")),
                bench_conv(a.trials, a.budget, os.path.join(folder, "conv2d.jsonl"))]
        print(f"\n{'operator':<20} {'trials':>6} {'wall s':>8} {'tuned GFLOP/s':>14} "
              f"{'numpy GFLOP/s':>14} {'tuned/numpy':>12}")
        for name, n, wall, ours, ref, ratio in rows:
            print(f"{name:<20} {n:>6} {wall:>8.1f} {ours:>14.1f} {ref:>14.1f} {ratio:>11.2f}x")
    if not a.skip_compare:
        print()
        compare_tuners(a.compare_trials, a.seeds, folder)
    del limiter


if __name__ == "__main__":
    main()
