"""Low precision GEMM, auto-scheduled (issue 26's Proof): n^3 in float32, u8 x s8 -> s32 and
bf16 -> fp32, each declared plainly and tuned by ``autotune.auto_schedule`` (the int8 one gets
the tensorize rule's sketches on a CPU with an int8 intrinsic), checked against NumPy (int8
exactly), timed in interleaved rounds against einloop's float32 and, when torch is installed,
PyTorch (oneDNN): ``torch.matmul`` in float32, ``torch._int_mm`` (int8 x int8 -> int32: it
has no u8 x s8 form, so it multiplies A shifted by -128 into int8; the same work, other
operands) and ``torch.matmul`` in bfloat16 (its output bfloat16, einloop's float32).

Prints the CPU and its low-precision features, the median rate of each kernel, the ratios, and
the issue's targets for the features this CPU has, each PASS or FAIL:
with VNNI int8 >= 3x einloop fp32; AVX2 only int8 >= 1.5x; with AVX512-BF16 bf16 >= 1.7x fp32;
with AMX bf16 and int8 >= 0.8x oneDNN and >= 6x einloop fp32.

    .venv/bin/python benchmarks/bench_lowprec.py [--size 1024] [--trials 200] [--rounds 5]
        [--target "llvm -mcpu=haswell"]

``--target`` tunes and builds einloop's kernels for another target the host can run (an AVX2
CPU's on an AVX-512 one, say): the features and targets printed are then that target's.
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import amx_ceiling  # noqa: E402
from common import interleaved, setup_peers  # noqa: E402
from einloop import autotune, build, te  # noqa: E402
from einloop.codegen.target import Target  # noqa: E402

FEATURES = ("avx2", "fma", "avx512f", "avx512vnni", "avxvnni", "avx512bf16", "amx-tile",
            "amx-int8", "amx-bf16")


def declare(kind, n):
    """The plain declaration of one GEMM kind: ``[A, B, C]``."""
    a_dt, b_dt = {"fp32": ("float32", "float32"), "int8": ("uint8", "int8"),
                  "bf16": ("bfloat16", "bfloat16")}[kind]
    acc = "int32" if kind == "int8" else "float32"
    A = te.placeholder((n, n), a_dt, name="A")
    B = te.placeholder((n, n), b_dt, name="B")
    k = te.reduce_axis((0, n), name="k")
    if kind == "fp32":
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    else:
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k].astype(acc) * B[k, j].astype(acc),
                                                   axis=k), name="C")
    return [A, B, C]


def arrays(kind, n, rng):
    if kind == "int8":
        a = rng.integers(0, 256, (n, n), dtype=np.uint8)
        b = rng.integers(-128, 128, (n, n), dtype=np.int8)
        return a, b, np.empty((n, n), np.int32)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    if kind == "bf16":
        import ml_dtypes
        a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    return a, b, np.empty((n, n), np.float32)


def check(kind, a, b, c):
    if kind == "int8":
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
    else:
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3 * np.sqrt(a.shape[1]))


def tuned(kind, n, trials, log_dir, target="llvm"):
    """The tuned kernel of *kind* (replayed from its log with 0 trials), checked, and its
    arrays; whether its schedule is tensorized."""
    tensors = declare(kind, n)
    tag = "" if target == "llvm" else "_" + "".join(c if c.isalnum() else "_" for c in target)
    log = os.path.join(log_dir, f"lowprec_{kind}_{n}{tag}.jsonl")
    s, args = autotune.auto_schedule(tensors, n_trial=trials or None, log=log, seed=0,
                                     target=target, quiet=True)
    f = build(s, args, target=target)
    arr = arrays(kind, n, np.random.default_rng(0))
    f(*arr)
    check(kind, *arr)
    return f, arr, any(st.kind.value == "tensorize" for st in s.steps)


def torch_calls(n):
    """``{kind: (call, what)}`` of PyTorch's kernels, or {} without torch."""
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(int(os.environ.get("EINLOOP_NUM_THREADS", os.cpu_count())))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    a8 = torch.randint(-128, 128, (n, n), dtype=torch.int8, generator=g)
    b8 = torch.randint(-128, 128, (n, n), dtype=torch.int8, generator=g)
    xb, yb = x.to(torch.bfloat16), y.to(torch.bfloat16)
    out = {"fp32": (lambda: torch.matmul(x, y), "torch.matmul fp32"),
           "bf16": (lambda: torch.matmul(xb, yb), "torch.matmul bf16 (bf16 out)")}
    if hasattr(torch, "_int_mm"):
        out["int8"] = (lambda: torch._int_mm(a8, b8), "torch._int_mm s8 x s8 -> s32")
    return out


def targets(have, rate):
    """The issue's targets for the features in *have*: (what, ratio, wanted) each."""
    out = []
    if have["avx512vnni"] or have["avxvnni"]:
        out.append(("VNNI: int8 >= 3x einloop fp32", rate["int8"] / rate["fp32"], 3.0))
    elif have["avx2"]:
        out.append(("AVX2 only: int8 >= 1.5x einloop fp32", rate["int8"] / rate["fp32"], 1.5))
    if have["avx512bf16"]:
        out.append(("AVX512-BF16: bf16 >= 1.7x einloop fp32", rate["bf16"] / rate["fp32"], 1.7))
    if have["amx-tile"]:
        for kind in ("int8", "bf16"):
            out.append((f"AMX: {kind} >= 6x einloop fp32", rate[kind] / rate["fp32"], 6.0))
            if f"torch {kind}" in rate:
                out.append((f"AMX: {kind} >= 0.8x oneDNN", rate[kind] / rate[f"torch {kind}"],
                            0.8))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=1024, help="n of the n^3 GEMMs")
    p.add_argument("--trials", type=int, default=200, help="trials per GEMM (0: replay logs)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    p.add_argument("--log-dir", default="tuning_logs/bench_lowprec",
                   help="where the tuning logs go (a rerun with --trials 0 replays them)")
    p.add_argument("--target", default="llvm",
                   help="einloop's target (one the host runs, e.g. 'llvm -mcpu=haswell')")
    a = p.parse_args(argv)
    os.makedirs(a.log_dir, exist_ok=True)
    _limiter, threads, peers = setup_peers()      # the limiter holds BLAS's threads
    print(peers)
    target = Target.parse(a.target)
    have = {f: target.has_feature(f) for f in FEATURES}
    print(f"target {a.target}: " if a.target != "llvm" else "features: ", end="")
    print(", ".join(f"{f} {'yes' if v else 'no'}" for f, v in have.items()))
    n = a.size
    calls, names = [], []
    for kind in ("fp32", "int8", "bf16"):
        f, arr, tensorized = tuned(kind, n, a.trials, a.log_dir, a.target)
        calls.append(lambda f=f, arr=arr: f(*arr))
        names.append(kind)
        print(f"einloop {kind}: tuned ({a.trials} trials), "
              f"{'exact' if kind == 'int8' else 'close'} to NumPy"
              + (", tensorized" if tensorized else ""))
    what = {}
    for kind, (call, label) in torch_calls(n).items():
        calls.append(call)
        names.append(f"torch {kind}")
        what[f"torch {kind}"] = label
    times = dict(zip(names, interleaved(calls, a.rounds)))
    work = 2 * n ** 3 / 1e9
    rate = {k: work / statistics.median(t) for k, t in times.items()}
    print(f"\nGEMM {n}^3, {threads} threads, medians of {a.rounds} interleaved rounds")
    print(f"{'kernel':<34} {'G(FL)OP/s':>10} {'vs einloop fp32':>16}")
    for k in names:
        label = what.get(k, f"einloop {k}")
        print(f"{label:<34} {rate[k]:10.1f} {rate[k] / rate['fp32']:15.2f}x")
    for kind in ("int8", "bf16"):
        if f"torch {kind}" in rate:
            print(f"einloop {kind} / {what[f'torch {kind}']}: "
                  f"{rate[kind] / rate[f'torch {kind}']:.2f}x")
    if have["amx-tile"] and a.target == "llvm":
        print(f"\nAMX ceiling (amx_ceiling.py: einloop's 2 x 2 tile block, every tile in L1, "
              f"one core, times {threads} threads):")
        for kind in ("int8", "bf16"):
            top = amx_ceiling.per_core(kind)
            if top is not None:
                print(f"  {kind}: {top:7.0f} per core, {top * threads:7.0f} in all = "
                      f"{top * threads / rate['fp32']:.1f}x einloop fp32; einloop {kind} at "
                      f"{rate[kind] / (top * threads):.0%} of it")
    print("\ntargets for this CPU's features:")
    for label, ratio, wanted in targets(have, rate):
        print(f"  {label:<44} {ratio:6.2f}x  {'PASS' if ratio >= wanted else 'FAIL'}")


if __name__ == "__main__":
    main()
