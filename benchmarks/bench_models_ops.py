"""The auto-scheduler on operators of current models, against NumPy and PyTorch eager, in one run.

Operators (issue 23): the SwiGLU MLP's up projection silu(X @ W1) * (X @ W3) with X 128x1024 and
W 1024x2816; the same with a symbolic batch n, tuned at n = 1, 16, 128 and run at n = 1, 17, 128;
causal attention, 8 heads, S = 512, D = 64; a transposed conv2d 64 -> 32 channels, 28 -> 56,
kernel 4, stride 2, padding 1 (the gather form of ``examples/model_ops.py``); the sum of all
elements of 64x256x256; a GEMV 4096x4096; and, beyond the issue's list, a stride-2 conv2d
64 -> 128 channels, 56 -> 28 (a ResNet downsampling layer).  Each is auto-scheduled (``--trials`` per operator and
per tuned size, resuming from ``--log-dir``), checked against NumPy, then timed with its NumPy
and PyTorch versions in interleaved settled rounds, in an order that rotates; each peer's ratio
to einloop is taken within a round and the median over the rounds reported.

The full sum and the GEMV only stream their input, so they are also given as a share of the
machine's copy bandwidth, measured here: the fastest of NumPy's copy, PyTorch's copy and a
parallel einloop copy of a 64 MiB array (bytes read + bytes written per second).

Targets: every operator >= 1.0x the better of NumPy and PyTorch eager, the symbolic SwiGLU at
each size; the full sum and the GEMV at >= 70% of the copy bandwidth.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_models_ops.py \
        [--trials 200] [--rounds 5] [--ops swiglu,swiglu_dynamic,attention,conv2d_transpose,conv2d_s2,sum,gemv]
"""
import math
import os
import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

try:                        # PyTorch first, as in a model's process: einloop shares its OpenMP
    import torch
except ImportError:
    torch = None

import conv2d  # noqa: E402
import model_ops  # noqa: E402
from common import (Row, checked_kernel, failures_reported, interleaved,  # noqa: E402
                    operator_arguments, run_each, setup_peers, torch_call)
from einloop import autotune, build, create_schedule, te  # noqa: E402
from einloop.autotune.symbolic import tune as symbolic_tune  # noqa: E402

BANDWIDTH_SHARE = 0.7


def normal(rng, *shape, scale=1.0):
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


def _swiglu_torch(x, w1, w3):
    return torch.nn.functional.silu(x @ w1) * (x @ w3)


def _attention_torch(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _conv_transpose_torch(a, w):
    return torch.nn.functional.conv_transpose2d(a, w, stride=2, padding=1)


def _conv_stride2_torch(a, w):
    return torch.nn.functional.conv2d(a, w, stride=2, padding=1)


@dataclass
class Op:
    """One benchmarked operator: its declaration, inputs, NumPy version (also the reference)
    and PyTorch version; *streamed*: bytes it must read, for a bandwidth share."""
    name: str
    label: str
    declare: Callable                       # () -> tensors, inputs first, the output last
    inputs: Callable                        # rng -> tuple of arrays
    numpy: Callable
    torch: Optional[Callable]               # arrays -> a call, or None
    rtol: float = 1e-3
    atol: float = 1e-3
    streamed: int = 0


X, W = (128, 1024), (1024, 2816)
OPS = [
    Op("swiglu", "SwiGLU 128x1024 @ 1024x2816", lambda: model_ops.swiglu(*X, W[1]),
       lambda r: (normal(r, *X), normal(r, *W, scale=0.03), normal(r, *W, scale=0.03)),
       model_ops.swiglu_reference, torch_call(_swiglu_torch)),
    Op("attention", "causal attention 8x512x64", lambda: model_ops.causal_attention(8, 512, 64),
       lambda r: tuple(normal(r, 8, 512, 64) for _ in range(3)),
       model_ops.causal_attention_reference, torch_call(_attention_torch), 1e-3, 1e-4),
    Op("conv2d_transpose", "conv_transpose 64->32 28->56 k4 s2",
       lambda: model_ops.conv2d_transpose(1, 64, 28, 28, 32),
       lambda r: (normal(r, 1, 64, 28, 28), normal(r, 64, 32, 4, 4, scale=0.1)),
       model_ops.conv2d_transpose_reference, torch_call(_conv_transpose_torch)),
    Op("conv2d_s2", "conv2d 64->128 56->28 k3 s2 (extra)",
       lambda: conv2d.conv2d(1, 64, 56, 56, 128, 3, 3, pad=1, stride=2),
       lambda r: (normal(r, 1, 64, 56, 56), normal(r, 128, 64, 3, 3, scale=0.1)),
       lambda a, w: conv2d.reference(a, w, pad=1, stride=2), torch_call(_conv_stride2_torch)),
    Op("sum", "full sum 64x256x256", lambda: model_ops.full_sum(64, 256, 256),
       lambda r: (normal(r, 64, 256, 256),), model_ops.full_sum_reference,
       torch_call(lambda x: x.sum()), 1e-4, 1e-2, streamed=64 * 256 * 256 * 4),
    Op("gemv", "GEMV 4096x4096", lambda: model_ops.gemv(4096, 4096),
       lambda r: (normal(r, 4096, 4096), normal(r, 4096)), model_ops.gemv_reference,
       torch_call(lambda a, x: torch.mv(a, x)), 1e-3, 1e-3,
       streamed=4096 * 4096 * 4),
]
DYNAMIC_HINTS = (1, 16, 128)
DYNAMIC_SIZES = (1, 17, 128)


def copy_bandwidth(rounds):
    """Bytes read + written per second by the fastest copy of a 64 MiB float32 array: NumPy's,
    PyTorch's (if installed) and einloop's parallel, vectorized copy; and which was fastest."""
    n = 16 * 1024 * 1024
    src = np.random.default_rng(0).random(n, dtype=np.float32)
    dst = np.empty_like(src)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i], name="B")
    s = create_schedule(B)
    outer, inner = s[B].split(B.op.axis[0], factor=64)
    s[B].parallel(outer)
    s[B].vectorize(inner)
    kernel = build(s, [A, B])
    calls = {"NumPy": lambda: np.copyto(dst, src), "einloop": lambda: kernel(src, dst)}
    if torch is not None:
        ts, td = torch.from_numpy(src), torch.from_numpy(dst)
        calls["PyTorch"] = lambda: td.copy_(ts)
    times = {name: statistics.median(t)
             for name, t in zip(calls, interleaved(list(calls.values()), rounds))}
    who = min(times, key=times.get)
    return 2 * src.nbytes / times[who], who


def tune_and_check(op, trials, log_dir):
    tensors = op.declare()
    log = os.path.join(log_dir, f"{op.name}.jsonl")
    s, args = autotune.auto_schedule(tensors, n_trial=trials, log=log) if trials else \
        autotune.auto_schedule(tensors, log=log if os.path.exists(log) else None)
    arrays = op.inputs(np.random.default_rng(0))
    f, out = checked_kernel(s, args, arrays, op.numpy, op.rtol, op.atol, op.name)
    return f, arrays, out


def run_op(op, trials, log_dir, rounds):
    f, arrays, out = tune_and_check(op, trials, log_dir)
    calls = [lambda: f(*arrays, out), lambda: op.numpy(*arrays)]
    if op.torch is not None:
        calls.append(op.torch(*arrays))
    times = interleaved(calls, rounds)
    return [Row(op.label, times[0], times[1], times[2] if len(times) > 2 else None,
                op.streamed)]


def run_dynamic(trials, log_dir, rounds):
    """SwiGLU with a symbolic batch: tuned at DYNAMIC_HINTS, run at DYNAMIC_SIZES."""
    n = te.size_var("n")
    tensors = model_ops.swiglu(n, *W)
    log = os.path.join(log_dir, "swiglu_dynamic.jsonl")
    if trials:
        # --trials per tuned size for the searches, the side-by-side round its share on top
        n_trial = math.ceil(trials * len(DYNAMIC_HINTS) / (1 - symbolic_tune.ROUND_SHARE))
        d, args = autotune.auto_schedule(tensors, n_trial=n_trial, log=log,
                                         shape_hints={"n": list(DYNAMIC_HINTS)})
    else:
        d, args = autotune.auto_schedule(tensors, log=log if os.path.exists(log) else None)
    rows = []
    for size in DYNAMIC_SIZES:
        rng = np.random.default_rng(size)
        arrays = (normal(rng, size, W[0]), normal(rng, *W, scale=0.03),
                  normal(rng, *W, scale=0.03))
        f, out = checked_kernel(d, args, arrays, model_ops.swiglu_reference, 1e-3, 1e-3,
                                f"symbolic SwiGLU at n = {size}")
        calls = [lambda: f(*arrays, out), lambda: model_ops.swiglu_reference(*arrays)]
        if torch is not None:
            calls.append(torch_call(_swiglu_torch)(*arrays))
        times = interleaved(calls, rounds)
        rows.append(Row(f"SwiGLU symbolic n={size}", times[0], times[1],
                        times[2] if len(times) > 2 else None))
    return rows


def report(rows, bandwidth, copier):
    print(f"\n{'operator':<36} {'einloop ms':>10} {'NumPy ms':>9} {'torch ms':>9} "
          f"{'x NumPy':>8} {'x torch':>8} {'GB/s':>6} {'of copy':>7}  target")
    passed = 0
    med = statistics.median
    for r in rows:
        ours = med(r.ours)
        ok = r.best_peer_ratio >= 1.0
        share = ""
        if r.streamed:
            gbs = r.streamed / ours
            ok = ok and gbs >= BANDWIDTH_SHARE * bandwidth
            share = f"{gbs / 1e9:>6.1f} {gbs / bandwidth:>7.0%}"
        else:
            share = f"{'':>6} {'':>7}"
        torch_ms = f"{med(r.torch) * 1e3:>9.3f}" if r.torch is not None else f"{'-':>9}"
        torch_x = f"{r.ratio(r.torch):>7.2f}x" if r.torch is not None else f"{'-':>8}"
        passed += ok
        print(f"{r.label:<36} {ours * 1e3:>10.3f} {med(r.numpy) * 1e3:>9.3f} {torch_ms} "
              f"{r.ratio(r.numpy):>7.2f}x {torch_x} {share}  {'pass' if ok else 'FAIL'}")
    print(f"(ms: medians over rounds; x NumPy, x torch: the median over rounds of the peer's time / "
          f"einloop's in the same round, > 1: einloop faster; copy bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s, {copier}'s copy of 64 MiB; targets: >= 1.0x the better "
          f"peer, streaming operators >= {BANDWIDTH_SHARE:.0%} of copy)")
    print(f"{passed} of {len(rows)} rows meet their targets; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main(argv=None):
    a, chosen = operator_arguments(
        __doc__, [o.name for o in OPS] + ["swiglu_dynamic"], 200,
        os.path.join("tuning_logs", "bench_models_ops"), argv,
        trials_help="trials per operator and per tuned size (0: replay the logs)")
    limiter, threads, blas = setup_peers()
    if torch is not None:
        torch.set_num_threads(threads)
    print(f"einloop on models' operators: {threads} thread(s); {blas}; "
          f"PyTorch {torch.__version__ + ' eager' if torch is not None else 'not installed'}")
    print(f"{a.trials} trials per operator (and per tuned size); logs in {a.log_dir}")
    by_name = {o.name: o for o in OPS}

    def run(name):
        if name == "swiglu_dynamic":
            return run_dynamic(a.trials, a.log_dir, a.rounds)
        return run_op(by_name[name], a.trials, a.log_dir, a.rounds)

    rows, failed = run_each(chosen, run)
    bandwidth, copier = copy_bandwidth(a.rounds)
    report(rows, bandwidth, copier)
    del limiter
    return failures_reported(failed)


if __name__ == "__main__":
    sys.exit(main())
