"""Auto-scheduling benchmark: operators declared as plain functions (no template, no hand
schedule) tuned by ``autotune.auto_schedule``, then checked and timed against NumPy and, where
``examples/`` has one, the hand schedule or template.  Everything printed is measured in this run.

Run it with OpenBLAS's own kernel choice (the Makefile's `bench-auto` target does):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_auto.py

Options: --trials (per operator, default 200; 0: no tuning, the log's best or else the
untuned default schedule), --budget (seconds per operator, default 300), --ops (a comma-separated
subset, default all), --log-dir (default tuning_logs/bench_auto; a rerun resumes from these logs),
--template-log-dir (where `einloop tune` wrote the templates' logs, gemm.jsonl and conv2d.jsonl;
default tuning_logs; without a record there the hand schedule is used).
"""
import argparse
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import attention  # noqa: E402
import batch_matmul  # noqa: E402
import conv2d  # noqa: E402
import dense  # noqa: E402
import depthwise_conv2d  # noqa: E402
import gemm  # noqa: E402
import layer_norm  # noqa: E402
import softmax  # noqa: E402
from common import checked_kernel, setup_peers, versus  # noqa: E402
from einloop import autotune  # noqa: E402
from einloop.autotune.task.base import count_flops  # noqa: E402


@dataclass(frozen=True)
class Target:
    """A goal of the issue: the tuned kernel at least *ratio* times as fast as *peer*."""
    peer: str               # "numpy" or "hand"
    ratio: float

    def __str__(self):
        return f">={self.ratio:g}x {self.peer}"


@dataclass
class Op:
    """One benchmarked operator: its declaring function and arguments, random inputs, the NumPy
    peer, the hand schedule or template of examples/ (if any) and the issue's targets."""
    name: str
    label: str
    fn: Callable
    args: tuple
    inputs: Callable                        # rng -> tuple of arrays
    numpy: Callable                         # arrays -> output (the peer, also the reference)
    rtol: float
    atol: float
    hand: Optional[Callable] = None         # (template_log_dir) -> ((s, args), description)
    targets: tuple = field(default=())


def uniform(rng, *shape):
    return rng.random(shape, dtype=np.float32)


def normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def template_or_hand(template, args, hand, log_dir):
    """The template's best config from its tuned log if that log has a record of *args*, else
    the hand schedule; and which one it is."""
    path = os.path.join(log_dir, f"{template.template_name}.jsonl")
    if os.path.exists(path):
        key = autotune.create_task(template, args).workload_key
        ctx = autotune.apply_history_best(path)
        if key in ctx.best:
            with ctx:
                return template(*args), f"template ({path})"
    return hand(*args), "hand schedule"


GEMM = (1024, 1024, 1024)
CONV = (1, 64, 56, 56, 64, 3, 3)            # the core benchmark's conv2d (pad 1, stride 1)
SOFTMAX = (4096, 1024)                      # the core benchmark's softmax
NUMPY_FLOOR = Target("numpy", 1.0)          # none slower than NumPy
HAND_FLOOR = Target("hand", 0.85)           # every operator >= 0.85x its hand schedule

OPS = [
    Op("gemm", "gemm 1024^3", gemm.gemm, GEMM,
       lambda r: (uniform(r, 1024, 1024), uniform(r, 1024, 1024)), gemm.reference, 1e-3, 1e-3,
       hand=lambda d: template_or_hand(gemm.gemm_template, GEMM, gemm.schedule, d),
       targets=(Target("numpy", 0.95), HAND_FLOOR)),
    Op("batch_matmul", "batch matmul 16x256^3", batch_matmul.batch_matmul, (16, 256, 256, 256),
       lambda r: (uniform(r, 16, 256, 256), uniform(r, 16, 256, 256)), batch_matmul.reference,
       1e-3, 1e-3, targets=(NUMPY_FLOOR,)),
    Op("conv2d", "conv2d 64x56x56 k3", conv2d.conv2d, CONV,
       lambda r: (uniform(r, 1, 64, 56, 56), uniform(r, 64, 64, 3, 3)), conv2d.reference,
       1e-3, 1e-3, hand=lambda d: template_or_hand(conv2d.conv2d_template, CONV,
                                                   conv2d.schedule, d),
       targets=(Target("numpy", 1.5), HAND_FLOOR)),
    Op("softmax", "softmax 4096x1024", softmax.softmax, SOFTMAX,
       lambda r: (normal(r, *SOFTMAX),), softmax.reference, 1e-4, 1e-6,
       hand=lambda d: (softmax.schedule(*SOFTMAX), "hand schedule"),
       targets=(Target("numpy", 6.0), HAND_FLOOR)),
    Op("depthwise_conv2d", "depthwise 128x56x56 k3", depthwise_conv2d.depthwise_conv2d,
       (1, 128, 56, 56, 3, 3, 1),
       lambda r: (normal(r, 1, 128, 56, 56), normal(r, 128, 3, 3)),
       lambda a, w: depthwise_conv2d.reference(a, w, 1), 1e-4, 1e-4, targets=(NUMPY_FLOOR,)),
    Op("layer_norm", "layer norm 4096x1024", layer_norm.layer_norm, (4096, 1024),
       lambda r: (normal(r, 4096, 1024), normal(r, 1024), normal(r, 1024)), layer_norm.reference,
       1e-3, 1e-4, targets=(NUMPY_FLOOR,)),
    Op("dense_bias_gelu", "dense+bias+gelu 512x1k^2", dense.dense_bias_gelu, (512, 1024, 1024),
       lambda r: (normal(r, 512, 1024), normal(r, 1024, 1024) / np.float32(32.0),
                  normal(r, 1024)), dense.reference, 1e-3, 1e-3, targets=(NUMPY_FLOOR,)),
    Op("attention", "attention S=256 D=64", attention.attention, (256, 64),
       lambda r: (normal(r, 256, 64), normal(r, 256, 64), normal(r, 256, 64)),
       attention.reference, 1e-3, 1e-4, targets=(NUMPY_FLOOR,)),
]


@dataclass
class Row:
    op: Op
    trials: int = 0                 # records in the log after this run
    new: int = 0                    # of which measured in this run
    wall: float = 0.0
    gflops: float = 0.0
    vs_numpy: Optional[float] = None
    vs_hand: Optional[float] = None
    hand_kind: str = "-"
    error: str = ""

    def verdicts(self):
        """(target, passed) for each of the operator's targets."""
        got = {"numpy": self.vs_numpy, "hand": self.vs_hand}
        return [(t, got[t.peer] is not None and got[t.peer] >= t.ratio) for t in self.op.targets]


def count_records(path):
    if not os.path.exists(path):
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return len(autotune.load_log(path))


def calls_per_round(fn):
    """Calls per timing repeat so that a repeat takes ~50 ms (at least 1, at most 20)."""
    t0 = time.perf_counter()
    fn()
    return max(1, min(20, int(0.05 / max(time.perf_counter() - t0, 1e-6))))


def run_op(op, trials, budget, log_dir, template_log_dir):
    """Auto-schedule *op* (resuming from its log), check it against NumPy and time it."""
    row = Row(op)
    log = os.path.join(log_dir, f"{op.name}.jsonl")
    before = count_records(log)
    tensors = op.fn(*op.args)
    t0 = time.time()
    if trials > 0:
        s, args = autotune.auto_schedule(tensors, n_trial=trials, time_budget_s=budget, log=log)
    else:                           # no tuning: the log's best, else the untuned default
        s, args = autotune.auto_schedule(tensors, log=log if before else None)
    row.wall = time.time() - t0
    row.trials = count_records(log)
    row.new = row.trials - before
    arrays = op.inputs(np.random.default_rng(0))
    f, out = checked_kernel(s, args, arrays, op.numpy, op.rtol, op.atol, op.name)

    def tuned():
        f(*arrays, out)

    def peer():
        op.numpy(*arrays)

    number = calls_per_round(tuned)
    t_np, t_ours, row.vs_numpy = versus(peer, tuned, number=number)
    row.gflops = count_flops(args) / t_ours / 1e9
    if op.hand is not None:
        (hs, hargs), row.hand_kind = op.hand(template_log_dir)
        h, hout = checked_kernel(hs, hargs, arrays, op.numpy, op.rtol, op.atol,
                                 f"{op.name} ({row.hand_kind})")
        _, _, row.vs_hand = versus(lambda: h(*arrays, hout), tuned, number=number)
    return row


def print_table(rows):
    print(f"\n{'operator':<25} {'trials':>11} {'wall s':>7} {'GFLOP/s':>8} {'vs numpy':>9} "
          f"{'vs hand':>8}  {'hand/template':<14} targets")
    for r in rows:
        if r.error:
            print(f"{r.op.label:<25} FAILED: {r.error}")
            continue
        hand = f"{r.vs_hand:7.2f}x" if r.vs_hand is not None else f"{'-':>8}"
        kind = r.hand_kind if len(r.hand_kind) <= 14 else "template (log)"
        verdicts = ", ".join(f"{t} {'pass' if ok else 'FAIL'}" for t, ok in r.verdicts())
        print(f"{r.op.label:<25} {r.trials:>5} ({r.new:>3}) {r.wall:>7.1f} {r.gflops:>8.1f} "
              f"{r.vs_numpy:>8.2f}x {hand}  {kind:<14} {verdicts}")
    print("(trials: records in the operator's log (measured in this run); vs numpy / vs hand: "
          "their time / the tuned kernel's time, the median of interleaved rounds; > 1 is faster)")
    for r in rows:
        if r.hand_kind.startswith("template ("):
            print(f"{r.op.name}: compared with the template's best config from "
                  f"{r.hand_kind[len('template ('):-1]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=200,
                   help="trials per operator (default 200; 0: replay the log, or the default)")
    p.add_argument("--budget", type=float, default=300,
                   help="tuning time budget per operator, seconds (default 300)")
    p.add_argument("--ops", default="", help=f"comma-separated subset of: "
                   f"{', '.join(o.name for o in OPS)}")
    p.add_argument("--log-dir", default=os.path.join("tuning_logs", "bench_auto"))
    p.add_argument("--template-log-dir", default="tuning_logs")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.ops.split(",") if n.strip()]
    unknown = sorted(set(names) - {o.name for o in OPS})
    if unknown:
        p.error(f"unknown operator(s) {', '.join(unknown)}; known: "
                f"{', '.join(o.name for o in OPS)}")
    ops = [o for o in OPS if not names or o.name in names]
    os.makedirs(a.log_dir, exist_ok=True)

    limiter, threads, blas = setup_peers()
    print(f"einloop auto-scheduling benchmark: {threads} thread(s); {blas}")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"{a.trials} trials and {a.budget:g} s per operator; logs in {a.log_dir}")
    rows = []
    for op in ops:
        print(f"\n== {op.label}: auto_schedule({op.fn.__name__}{op.args})", flush=True)
        try:
            rows.append(run_op(op, a.trials, a.budget, a.log_dir, a.template_log_dir))
        except Exception as exc:            # noqa: BLE001 -- report it, go on with the others
            traceback.print_exc()
            rows.append(Row(op, error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))
    print_table(rows)
    del limiter
    failed = [r for r in rows if r.error or not all(ok for _, ok in r.verdicts())]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} operators meet all their targets")
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
