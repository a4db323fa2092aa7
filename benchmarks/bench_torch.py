"""einloop custom ops inside PyTorch: forward alone, and forward + backward, against PyTorch
eager and torch.compile (Inductor, default mode), on the same tensors, in one run.

Operators (issue 22): RMSNorm 4096x1024; SwiGLU silu(X @ W1) * (X @ W3), X 128x1024, W 1024x2816;
causal attention, 8 heads, S = 512, D = 64; conv2d + bias + ReLU, 1x64x56x56, 3x3, padding 1.
Each einloop operator's forward and gradient kernels are tuned with ``einloop.torch.tune``
(``--trials`` at most per operator, split between its kernels by their flops, and no kernel
more than ``--per-kernel``, the issue's 200; logs in ``--log-dir``, which a rerun replays
without measuring).  Then every variant is timed in many short interleaved rounds, in an order
that rotates; each peer's ratio to einloop is taken within each round and the median over the
rounds reported (> 1: einloop faster), with its quartiles.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_torch.py \
        [--trials 800] [--per-kernel 200] [--rounds 40] [--ops rmsnorm,swiglu,attention,conv2d]
"""
import argparse
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from common import cpu_description  # noqa: E402
from model_ops import causal_attention_of as causal_attention  # noqa: E402

import einloop.torch as et  # noqa: E402
from einloop.torch.tune import kernel_declarations, trial_shares  # noqa: E402
from einloop import te  # noqa: E402


# the declarations -------------------------------------------------------------------------------
def rmsnorm(x, w):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    ss = te.compute((n,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="ss")
    return te.compute((n, d), lambda i, j: x[i, j] / te.sqrt(ss[i] / d + 1e-6) * w[j], name="y")


def swiglu(x, w1, w3):
    n, kk = x.shape
    m = w1.shape[1]
    k = te.reduce_axis((0, kk), name="k")
    g = te.compute((n, m), lambda i, j: te.sum(x[i, k] * w1[k, j], axis=k), name="g")
    k3 = te.reduce_axis((0, kk), name="k3")
    u = te.compute((n, m), lambda i, j: te.sum(x[i, k3] * w3[k3, j], axis=k3), name="u")
    return te.compute((n, m), lambda i, j: g[i, j] * te.sigmoid(g[i, j]) * u[i, j], name="h")


def conv2d_bias_relu(x, w, b):
    n, c, hh, ww = x.shape
    o, _, kh, kw = w.shape
    p = te.compute((n, c, hh + 2, ww + 2), lambda a, ci, y, xx: te.if_then_else(
        te.all(y >= 1, y < hh + 1, xx >= 1, xx < ww + 1), x[a, ci, y - 1, xx - 1], 0.0),
        name="pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    conv = te.compute((n, o, hh, ww), lambda a, f, y, xx: te.sum(
        p[a, rc, y + ry, xx + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    return te.compute(conv.shape, lambda a, f, y, xx: te.max(conv[a, f, y, xx] + b[f], 0.0),
                      name="out")


# PyTorch's versions ----------------------------------------------------------------------------
def rmsnorm_eager(x, w):
    return x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6) * w


def swiglu_eager(x, w1, w3):
    return torch.nn.functional.silu(x @ w1) * (x @ w3)


def attention_eager(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def conv_eager(x, w, b):
    return torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1))


def _inputs(*shapes, scale=1.0):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) * scale for s in shapes]


OPS = {
    "rmsnorm": ("RMSNorm 4096x1024", rmsnorm, rmsnorm_eager, lambda: _inputs((4096, 1024), (1024,))),
    "swiglu": ("SwiGLU 128x1024 @ 1024x2816", swiglu, swiglu_eager,
               lambda: _inputs((128, 1024), (1024, 2816), (1024, 2816), scale=0.05)),
    "attention": ("causal attention 8x512x64", causal_attention, attention_eager,
                  lambda: _inputs((8, 512, 64), (8, 512, 64), (8, 512, 64))),
    "conv2d": ("conv2d+bias+relu 64x56x56 k3", conv2d_bias_relu, conv_eager,
               lambda: _inputs((1, 64, 56, 56), (64, 64, 3, 3), (64,), scale=0.1)),
}


# timing ----------------------------------------------------------------------------------------
def forward(fn, args):
    def call():
        with torch.no_grad():
            fn(*args)
    return call


def forward_backward(fn, args):
    leaves = [a.detach().clone().requires_grad_() for a in args]

    def call():
        for a in leaves:
            a.grad = None
        fn(*leaves).sum().backward()
    return call


def interleaved(calls, rounds, seconds=0.05):
    """``{name: [seconds per call, one per round]}`` of each of *calls* (name -> callable),
    timed in *rounds* rounds that take turns, each call repeated for about *seconds* per round
    after one warm-up call.  The order rotates from round to round, so no call always runs
    right after the same other one (it inherits that one's caches).  The VM is shared: its
    speed drifts by tens of percent within seconds, so many short rounds, each giving a ratio
    of calls measured a moment apart, resist the drift better than a few long ones."""
    names = list(calls)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            call = calls[name]
            call()
            n, t0 = 0, time.perf_counter()
            while True:
                call()
                n += 1
                if time.perf_counter() - t0 >= seconds:
                    break
            times[name].append((time.perf_counter() - t0) / n)
    return times


def ratio(times, peer, of="einloop"):
    """The median over rounds of *peer*'s time / *of*'s time in the same round (> 1: *of* is
    faster), and the quartiles of those ratios, the spread the noise left."""
    q = statistics.quantiles([p / o for p, o in zip(times[peer], times[of])], n=4)
    return q[1], q[0], q[2]


def budget(op, args, most, per_kernel):
    """The largest total of at most *most* trials whose split between *op*'s kernels
    (``einloop.torch.tune``'s, by flops) gives none more than *per_kernel*; and that split."""
    kernels = kernel_declarations(op, op.signature(args))
    n, shares = most, trial_shares(most, kernels)
    if max(shares) > per_kernel:                # the split is proportional: scale, then
        n = most * per_kernel // max(shares)    # adjust for its rounding
        while n > len(kernels) and max(trial_shares(n, kernels)) > per_kernel:
            n -= 1
        while n < most and max(trial_shares(n + 1, kernels)) <= per_kernel:
            n += 1
        shares = trial_shares(n, kernels)
    return n, shares


def check(name, op, eager, args):
    """einloop's forward and gradients equal eager's (relative to the largest value)."""
    leaves_a = [a.detach().clone().requires_grad_() for a in args]
    leaves_b = [a.detach().clone().requires_grad_() for a in args]
    ya, yb = op(*leaves_a), eager(*leaves_b)
    ya.sum().backward()
    yb.sum().backward()
    worst = max(float((p - q).abs().max() / (q.abs().max() + 1e-12))
                for p, q in [(ya, yb)] + [(a.grad, b.grad) for a, b in zip(leaves_a, leaves_b)])
    if worst > 1e-3:
        raise SystemExit(f"{name}: einloop differs from PyTorch eager by {worst:.2e} (relative)")
    return worst


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=800,
                   help="measurements per operator at most, split between its kernels by "
                        "their flops")
    p.add_argument("--per-kernel", type=int, default=200,
                   help="measurements per kernel at most (the issue's budget): an operator "
                        "whose split would give one kernel more gets a smaller total")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--log-dir", default=os.path.join("tuning_logs", "bench_torch"))
    a = p.parse_args(argv)
    os.makedirs(a.log_dir, exist_ok=True)
    print(cpu_description())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; einloop: "
          f"{a.trials} trials per operator (forward and gradient kernels); "
          f"{a.rounds} interleaved rounds of 0.05 s per variant")
    rows = []
    for key in a.ops.split(","):
        label, decl, eager, make = OPS[key]
        args = make()
        log = os.path.join(a.log_dir, f"{key}.jsonl")
        untuned = et.custom_op(f"bench_torch::{key}_tune")(decl)
        n_trial, shares = budget(untuned, args, a.trials, a.per_kernel)
        print(f"  {label}: {n_trial} trials, per kernel {shares}", flush=True)
        t0 = time.perf_counter()
        et.tune(untuned, args, n_trial=n_trial, log=log, quiet=True)
        tuning = time.perf_counter() - t0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op = et.custom_op(f"bench_torch::{key}", log=log)(decl)
            worst = check(label, op, eager, args)
            compiled = torch.compile(eager)
            fwd = interleaved({"einloop": forward(op, args), "eager": forward(eager, args),
                               "inductor": forward(compiled, args)}, a.rounds)
            both = interleaved({"einloop": forward_backward(op, args),
                                "eager": forward_backward(eager, args),
                                "inductor": forward_backward(compiled, args)}, a.rounds)
        rows.append((label, tuning, worst, fwd, both))
        print(f"  {label}: tuned in {tuning:.0f} s, max relative difference to eager {worst:.1e}",
              flush=True)
    print(f"\n{'operator':<30} {'pass':<9} {'einloop ms':>10} {'eager ms':>9} {'inductor ms':>11} "
          f"{'x eager':>16} {'x inductor':>16}")
    med = statistics.median
    for label, _, _, fwd, both in rows:
        for what, t in (("forward", fwd), ("fwd+bwd", both)):
            cells = []
            for peer in ("eager", "inductor"):
                mid, lo, hi = ratio(t, peer)
                cells.append(f"{mid:>5.2f}x ({lo:.2f}-{hi:.2f})")
            print(f"{label:<30} {what:<9} {med(t['einloop']) * 1e3:>10.3f} "
                  f"{med(t['eager']) * 1e3:>9.3f} {med(t['inductor']) * 1e3:>11.3f} "
                  f"{cells[0]:>16} {cells[1]:>16}")
    print("(ms: medians over rounds; x eager, x inductor: the median over rounds of their time / "
          "einloop's in the same round, > 1 is einloop faster, with the quartiles.  Targets of "
          "issue 22: forward >= inductor; fwd+bwd >= eager everywhere and >= inductor on two)")


if __name__ == "__main__":
    main()
