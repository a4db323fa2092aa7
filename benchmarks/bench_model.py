"""Whole PyTorch models through torch.compile(backend="einloop"), tuned with
einloop.torch.tune_model, against PyTorch eager and torch.compile's default (Inductor).

Models (issue 24): an MLP (512 -> 2048 -> 2048 -> 512, GELU); nn.TransformerEncoderLayer(
d_model=512, nhead=8) at sequence 128 (its default sequence-first layout); a small CNN (four
conv-BN-ReLU blocks, 3 -> 32 -> 64 -> 64 -> 128 channels on 64x64, strides 1, 2, 1, 2, an
adaptive average pooling and a linear layer), each at batch 1 and 16, in inference
(``torch.no_grad``), in float32 or (``--dtype bfloat16``) with weights and inputs in bfloat16,
which einloop computes as PyTorch does (float32 sums, bfloat16 results).  Each (model, batch) is tuned with ``--trials`` in all (resuming from
``--log-dir``: a rerun with the logs replays them), then the three versions are checked equal and
timed in many short interleaved rounds in a rotating order; each peer's ratio to einloop is the
median over rounds of the ratios taken within a round (> 1: einloop faster), with quartiles.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_model.py \
        [--trials 400] [--rounds 30] [--models mlp,encoder,cnn] [--batches 1,16] \
        [--dtype float32|bfloat16]
"""
import argparse
import json
import os
import sys
import time
import warnings
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import interleaved, ratio  # noqa: E402
from common import cpu_description  # noqa: E402

import einloop.torch as et  # noqa: E402
from einloop.torch.backend import BackendWarning  # noqa: E402


class SmallCNN(torch.nn.Module):
    """Four conv-BN-ReLU blocks, an adaptive average pooling, a linear layer."""

    def __init__(self):
        super().__init__()
        chans, strides = [3, 32, 64, 64, 128], [1, 2, 1, 2]
        self.blocks = torch.nn.Sequential(*[
            torch.nn.Sequential(torch.nn.Conv2d(a, b, 3, stride=s, padding=1, bias=False),
                                torch.nn.BatchNorm2d(b), torch.nn.ReLU())
            for a, b, s in zip(chans, chans[1:], strides)])
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(self.pool(self.blocks(x)).flatten(1))


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                               torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                               torch.nn.Linear(2048, 512))


MODELS = {
    "mlp": (mlp, lambda b: torch.randn(b, 512)),
    "encoder": (lambda: torch.nn.TransformerEncoderLayer(d_model=512, nhead=8),
                lambda b: torch.randn(128, b, 512)),
    "cnn": (SmallCNN, lambda b: torch.randn(b, 3, 64, 64)),
}


#: the largest difference from eager, relative to the output's largest value, a version may
#: show: float32 sums in another order; bfloat16 results rounded at other points (8 bits)
TOLERANCE = {"float32": 1e-3, "bfloat16": 3e-2}


def run(name, batch, trials, rounds, log_dir, dtype="float32"):
    torch.manual_seed(0)
    make, inputs = MODELS[name]
    model = make().eval().to(getattr(torch, dtype))
    x = inputs(batch).to(getattr(torch, dtype))
    suffix = "" if dtype == "float32" else f"_{dtype}"
    log = os.path.join(log_dir, f"{name}_b{batch}{suffix}.jsonl")
    t0 = time.perf_counter()
    with torch.no_grad():
        if trials:
            progress = et.tune_model(model, (x,), n_trial=trials, log=log, quiet=True)
        else:            # deploy from the log as it is; without one, each task's first seed
            progress = [SimpleNamespace(mt=mt) for mt in et.extract_tasks(model, (x,))]
            log = log if os.path.exists(log) else None
    tuning = time.perf_counter() - t0
    logged = logged_tuning(log)
    versions = {"eager": model,
                "Inductor": torch.compile(model, dynamic=False),
                "einloop": torch.compile(model, backend="einloop", dynamic=False,
                                         options={"log": log} if log else {})}
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BackendWarning)
        want = model(x)
        for v, fn in versions.items():
            got = fn(x)
            worst = float((got.float() - want.float()).abs().max()
                          / (want.float().abs().max() + 1e-12))
            if worst > TOLERANCE[dtype]:
                raise SystemExit(f"{name} b{batch}: {v} differs from eager by {worst:.2e}")
        times = interleaved({v: (lambda fn=fn: fn(x)) for v, fn in versions.items()}, rounds)
    notes = sorted({str(w.message).split(":")[1].strip()[:60] for w in caught
                    if issubclass(w.category, BackendWarning)})
    kernels = sum(tp.mt.weight for tp in progress)
    return times, len(progress), kernels, tuning, logged, notes


#: a gap between two records of a log longer than this is a pause between tuning runs (a
#: resumed log), not tuning time
RESUME_GAP_S = 300


def logged_tuning(log):
    """(trials, seconds) a log holds: its records, and the time between consecutive records
    with the pauses between resumed runs (gaps over RESUME_GAP_S) left out; (0, 0) without
    a log."""
    if not log or not os.path.exists(log):
        return 0, 0.0
    with open(log) as f:
        stamps = sorted(json.loads(line)["timestamp"] for line in f if line.strip())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return len(stamps), sum(g for g in gaps if g <= RESUME_GAP_S)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=400,
                   help="trials per model and batch (0: deploy from the logs in --log-dir "
                        "as they are, or untuned where there is none)")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batches", default="1,16")
    p.add_argument("--log-dir", default=os.path.join("tuning_logs", "bench_model"))
    p.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32",
                   help="the models' weights and inputs")
    a = p.parse_args(argv)
    os.makedirs(a.log_dir, exist_ok=True)
    print(cpu_description())
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, {a.dtype}; "
          f"{a.trials} trials "
          f"per model and batch (logs in {a.log_dir}); {a.rounds} interleaved rounds of 0.05 s "
          "per version")
    rows = []
    for name in a.models.split(","):
        for batch in map(int, a.batches.split(",")):
            times, n_tasks, n_kernels, tuning, (trials, logged_s), notes = run(
                name, batch, a.trials, a.rounds, a.log_dir, a.dtype)
            rows.append((name, batch, times, n_tasks, n_kernels, tuning, notes))
            done = f"tuned in {tuning:.0f} s now, " if a.trials else ""
            print(f"  {name} batch {batch}: {n_tasks} tasks for {n_kernels} kernels, {done}"
                  f"{trials} trials in the log over {logged_s / 60:.1f} min of tuning"
                  + (f"; in PyTorch: {'; '.join(notes)}" if notes else ""), flush=True)
    print()
    print(f"{'model':9s} {'batch':>5s} {'einloop ms':>11s} {'eager ms':>9s} {'Inductor ms':>12s} "
          f"{'x eager':>16s} {'x Inductor':>16s}  target")
    met = 0
    for name, batch, times, *_ in rows:
        med = {v: sorted(t)[len(t) // 2] * 1e3 for v, t in times.items()}
        xe, xe_lo, xe_hi = ratio(times, "eager")
        xi, xi_lo, xi_hi = ratio(times, "Inductor")
        need_eager = 1.2 if name in ("encoder", "cnn") else 0.0
        ok = xi >= 1.0 and xe >= need_eager
        met += ok
        print(f"{name:9s} {batch:5d} {med['einloop']:11.3f} {med['eager']:9.3f} "
              f"{med['Inductor']:12.3f} {xe:5.2f} ({xe_lo:.2f}-{xe_hi:.2f}) "
              f"{xi:5.2f} ({xi_lo:.2f}-{xi_hi:.2f})  {'pass' if ok else 'FAIL'}")
    print(f"(x peer: the median over rounds of the peer's time / einloop's, quartiles in "
          f"brackets; targets: >= 1.0x Inductor everywhere, >= 1.2x eager for the encoder and "
          f"the CNN)\n{met} of {len(rows)} rows meet their targets; load average "
          f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
