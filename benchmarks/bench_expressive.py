"""The rest of the language, auto-scheduled, against NumPy and PyTorch eager, in one run.

Operators (issue 25), each declared with the construct it needs and auto-scheduled from scratch
(``--trials`` per operator, resuming from ``--log-dir``):

- argmax over the last axis of 4096x1000 (a tuple reducer: index and value in one pass), against
  ``np.argmax`` and ``torch.argmax``;
- cumsum of 4096x4096 along rows (axis 1) and along columns (axis 0) (scans), against
  ``np.cumsum`` and ``torch.cumsum``;
- layer-norm statistics of 4096x1024, mean and variance per row in one pass (a Welford tuple
  reducer), against ``np.var`` and ``torch.var_mean``;
- a 256-bin histogram of 16M int32 values (a scatter into bins), against ``np.bincount`` and
  ``torch.bincount``;
- an embedding's backward, V = 50k, D = 512, 64k ids (a scatter-add of rows), against
  ``np.add.at`` and ``torch.index_add_`` into zeros.

Each kernel is checked against NumPy (exactly for the integer results), then timed with its
peers in interleaved settled rounds, in an order that rotates; each peer's ratio to einloop is
taken within a round and the median over the rounds reported.  Targets: >= 3x NumPy on each
operator, and >= PyTorch eager on at least three.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_expressive.py \
        [--trials 100] [--rounds 5] [--ops argmax,cumsum_rows,cumsum_cols,welford,histogram,embedding_backward]
"""
import os
import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:                        # PyTorch first, as in a model's process: einloop shares its OpenMP
    import torch
except ImportError:
    torch = None

from common import (Row, failures_reported, interleaved, operator_arguments,  # noqa: E402
                    run_each, setup_peers, torch_call)
from einloop import autotune, build, te  # noqa: E402

NUMPY_TARGET = 3.0
TORCH_WINS_NEEDED = 3


def declare_argmax(rows, cols):
    X = te.placeholder((rows, cols), name="X")
    idx, val = te.argmax(X, axis=1)
    return [X, idx, val]


def declare_cumsum(rows, cols, axis):
    X = te.placeholder((rows, cols), name="X")
    return [X, te.cumsum(X, axis=axis)]


def declare_welford(rows, cols):
    """Mean and (population) variance per row in one pass over X (Welford's tuple reducer)."""
    X = te.placeholder((rows, cols), name="X")
    mean, var = te.welford(X, axis=1)
    return [X, mean, var]


def declare_histogram(n, bins):
    X = te.placeholder((n,), "int32", name="X")
    return [X, te.histogram(X, bins)]


def declare_embedding_backward(n_ids, dim, vocab):
    ids = te.placeholder((n_ids,), "int32", name="ids")
    grad = te.placeholder((n_ids, dim), name="grad")
    return [ids, grad, te.embedding_backward(ids, grad, vocab)]


def _add_at(ids, grad, vocab):
    out = np.zeros((vocab, grad.shape[1]), np.float32)
    np.add.at(out, ids, grad)
    return out


@dataclass
class Op:
    """One benchmarked operator: its declaration (inputs first, outputs last), its inputs, its
    NumPy version (also the reference: a tuple of the outputs), its PyTorch version (arrays ->
    a call) and how closely it must match (``exact`` for integer results)."""
    name: str
    label: str
    declare: Callable
    inputs: Callable
    numpy: Callable
    torch: Optional[Callable]
    rtol: float = 1e-4
    atol: float = 1e-4
    exact: bool = False


R_ARG, C_ARG = 4096, 1000
N_CUM = 4096
R_LN, C_LN = 4096, 1024
N_HIST, BINS = 16 * 1024 * 1024, 256
N_IDS, DIM, VOCAB = 64 * 1024, 512, 50_000

OPS = [
    Op("argmax", f"argmax {R_ARG}x{C_ARG}, last axis", lambda: declare_argmax(R_ARG, C_ARG),
       lambda r: (r.standard_normal((R_ARG, C_ARG), np.float32),),
       lambda x: (np.argmax(x, axis=1), np.max(x, axis=1)),
       torch_call(lambda x: torch.argmax(x, dim=1)), exact=True),
    Op("cumsum_rows", f"cumsum {N_CUM}x{N_CUM} along rows", lambda: declare_cumsum(N_CUM, N_CUM, 1),
       lambda r: (r.standard_normal((N_CUM, N_CUM), np.float32),),
       lambda x: (np.cumsum(x, axis=1),), torch_call(lambda x: torch.cumsum(x, 1)), 1e-3, 1e-2),
    Op("cumsum_cols", f"cumsum {N_CUM}x{N_CUM} along columns",
       lambda: declare_cumsum(N_CUM, N_CUM, 0),
       lambda r: (r.standard_normal((N_CUM, N_CUM), np.float32),),
       lambda x: (np.cumsum(x, axis=0),), torch_call(lambda x: torch.cumsum(x, 0)), 1e-3, 1e-2),
    Op("welford", f"Welford mean+var {R_LN}x{C_LN}", lambda: declare_welford(R_LN, C_LN),
       lambda r: (r.standard_normal((R_LN, C_LN), np.float32) + np.float32(3),),
       lambda x: (np.mean(x, axis=1), np.var(x, axis=1)),
       torch_call(lambda x: torch.var_mean(x, dim=1, unbiased=False)), 1e-4, 1e-4),
    Op("histogram", f"histogram {N_HIST // 2**20}M values, {BINS} bins",
       lambda: declare_histogram(N_HIST, BINS),
       lambda r: (r.integers(0, BINS, N_HIST, dtype=np.int32),),
       lambda x: (np.bincount(x, minlength=BINS).astype(np.int32),),
       torch_call(lambda x: torch.bincount(x, minlength=BINS)), exact=True),
    Op("embedding_backward", f"embedding backward V={VOCAB // 1000}k D={DIM} {N_IDS // 1024}k ids",
       lambda: declare_embedding_backward(N_IDS, DIM, VOCAB),
       lambda r: (r.integers(0, VOCAB, N_IDS, dtype=np.int32),
                  r.standard_normal((N_IDS, DIM), np.float32)),
       lambda ids, g: (_add_at(ids, g, VOCAB),),
       torch_call(lambda ids, g: torch.zeros(VOCAB, DIM).index_add_(0, ids, g)), 1e-4, 1e-4),
]


def tune_and_check(op, trials, log_dir):
    """The tuned kernel of *op*, checked against NumPy, its inputs and its outputs."""
    tensors = op.declare()
    log = os.path.join(log_dir, f"{op.name}.jsonl")
    if trials:
        s, args = autotune.auto_schedule(tensors, n_trial=trials, log=log)
    else:
        s, args = autotune.auto_schedule(tensors, log=log if os.path.exists(log) else None)
    f = build(s, args)
    arrays = op.inputs(np.random.default_rng(0))
    expect = op.numpy(*arrays)
    outs = [np.empty(e.shape, t.dtype) for e, t in zip(expect, args[len(arrays):])]
    f(*arrays, *outs)
    for got, want in zip(outs, expect):
        if op.exact:
            np.testing.assert_array_equal(got, want, err_msg=f"{op.name}: differs from NumPy")
        else:
            np.testing.assert_allclose(got, want, rtol=op.rtol, atol=op.atol,
                                       err_msg=f"{op.name}: differs from NumPy")
    return f, arrays, outs


def run_op(op, trials, log_dir, rounds):
    f, arrays, outs = tune_and_check(op, trials, log_dir)
    calls = [lambda: f(*arrays, *outs), lambda: op.numpy(*arrays)]
    if op.torch is not None:
        calls.append(op.torch(*arrays))
    times = interleaved(calls, rounds)
    return Row(op.label, times[0], times[1], times[2] if len(times) > 2 else None)


def report(rows):
    med = statistics.median
    print(f"\n{'operator':<40} {'einloop ms':>10} {'NumPy ms':>9} {'torch ms':>9} "
          f"{'x NumPy':>8} {'x torch':>8}  target")
    passed = torch_wins = 0
    for r in rows:
        ok = r.ratio(r.numpy) >= NUMPY_TARGET
        passed += ok
        torch_ms, torch_x = f"{'-':>9}", f"{'-':>8}"
        if r.torch is not None:
            torch_wins += r.ratio(r.torch) >= 1.0
            torch_ms, torch_x = f"{med(r.torch) * 1e3:>9.3f}", f"{r.ratio(r.torch):>7.2f}x"
        print(f"{r.label:<40} {med(r.ours) * 1e3:>10.3f} {med(r.numpy) * 1e3:>9.3f} {torch_ms} "
              f"{r.ratio(r.numpy):>7.2f}x {torch_x}  {'pass' if ok else 'FAIL'}")
    print(f"(ms: medians over rounds; x NumPy, x torch: the median over rounds of the peer's time "
          f"/ einloop's in the same round, > 1: einloop faster; target >= {NUMPY_TARGET:.0f}x "
          f"NumPy on each, >= torch on {TORCH_WINS_NEEDED})")
    print(f"{passed} of {len(rows)} rows >= {NUMPY_TARGET:.0f}x NumPy; einloop >= torch on "
          f"{torch_wins} (target {TORCH_WINS_NEEDED}); load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main(argv=None):
    a, chosen = operator_arguments(__doc__, [o.name for o in OPS], 100,
                                   os.path.join("tuning_logs", "bench_expressive"), argv)
    limiter, threads, blas = setup_peers()
    if torch is not None:
        torch.set_num_threads(threads)
    print(f"einloop on the rest of the language: {threads} thread(s); {blas}; "
          f"PyTorch {torch.__version__ + ' eager' if torch is not None else 'not installed'}")
    print(f"{a.trials} trials per operator; logs in {a.log_dir}")
    by_name = {o.name: o for o in OPS}
    rows, failed = run_each(chosen, lambda name: [run_op(by_name[name], a.trials, a.log_dir,
                                                         a.rounds)])
    report(rows)
    del limiter
    return failures_reported(failed)


if __name__ == "__main__":
    sys.exit(main())
