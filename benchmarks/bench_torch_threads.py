"""einloop kernels between PyTorch ops: do they keep their speed next to PyTorch's OpenMP pool?

PyTorch runs its ops on an OpenMP thread pool (its wheel ships a libgomp), einloop's parallel
kernels on libgomp's.  This benchmark times einloop kernels of a few hundred microseconds, each
call on its own, (a) alone, back to back, and (b) between two PyTorch ops, the neighbours
untimed:

- ``op``: an ``einloop.torch.custom_op``, called as a user calls it (``op(x)``);
- ``kernel``: the same declaration built with ``einloop.build`` and called with torch tensors
  (output preallocated);
- ``serial``: that kernel on one thread, no team: what the neighbours cost a kernel that has no
  thread pool (their caches), so ``kernel``'s ratio over ``serial``'s is the thread pool's part;
- ``torch``: PyTorch's own version of the operator, for what no runtime can avoid (a neighbour
  that runs through a few MB evicts the caches the call back to back had warm);
- ``torch op``: PyTorch's version registered with ``torch.library.custom_op`` (a Python custom
  op like einloop's), for what PyTorch's custom-op dispatch adds to ``op``'s call.

Operators: a matmul 128x512 @ 512x512 and SiLU on 1024x1024 (default schedules, parallel).
Neighbours: ``torch.mm`` of the matmul's size (before and after), and ``F.gelu`` before and
``F.softmax`` after, on 1024x1024.  Each measuring process is fresh, since which libgomp runs
what is decided when the first one loads:

- ``torch first``: ``import einloop.torch`` (which imports torch), as a user's program does;
- ``einloop first``: a parallel einloop kernel runs before torch is imported.

Each prints which libgomp copies the process mapped (``/proc/self/maps``), which one einloop's
kernels run on and its spin setting, the thread counts of both libraries, and how many threads
the process created while it was measured (one shared pool of stable size creates none).  The
ratios are alone / between (1.0: no loss), the median over interleaved rounds of each round's
median call; the target for einloop is >= 0.9.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python \
        benchmarks/bench_torch_threads.py [--rounds 15] [--calls 20] \
        [--orders "torch first,einloop first"]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = 0.9
ORDERS = ("torch first", "einloop first")

# What one measuring process runs; {order} says what is loaded first.  Prints one JSON line.
MEASURE = """
import sys
sys.path.insert(0, {here!r})
import bench_torch_threads as b
print(b.measure_json({order!r}, {rounds}, {calls}))
"""


def load_einloop_first():
    """Run a small parallel einloop kernel before torch is imported (einloop loads libgomp)."""
    import numpy as np
    from einloop import build, create_schedule, te
    x = te.placeholder((64, 64), "float32", "x")
    y = te.compute((64, 64), lambda i, j: x[i, j] * 2.0, name="y")
    s = create_schedule(y)
    s[y].parallel(s[y].op.axis[0])
    f = build(s, [x, y])
    f(np.ones((64, 64), np.float32), np.empty((64, 64), np.float32))


def declarations():
    from einloop import te

    def mm(a, b):
        n, k = a.shape
        r = te.reduce_axis((0, k), name="r")
        return te.compute((n, b.shape[1]), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r),
                          name="c")

    def silu(x):
        return te.compute(x.shape, lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="y")
    return mm, silu


def python_op(name, fn, arity):
    """*fn* (a PyTorch function of *arity* tensors) as a ``torch.library`` custom op."""
    import torch
    params = ", ".join(f"Tensor a{i}" for i in range(arity))
    op = torch.library.custom_op(f"bench_threads::torch_{name}", lambda *args: fn(*args),
                                 mutates_args=(), schema=f"({params}) -> Tensor")
    op.register_fake(lambda *args: fn(*args))
    return op


def serial(kernel, args, out):
    """Call *kernel* on one thread (no team)."""
    kernel.num_threads = 1
    try:
        kernel(*args, out)
    finally:
        kernel.num_threads = None


def gomp_maps():
    """The libgomp files mapped into this process."""
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f
                       if "/" in line and "libgomp" in os.path.basename(line.split()[-1])})


def thread_ids():
    return set(os.listdir("/proc/self/task"))


def measure_json(order, rounds, calls):
    """In a measuring process: set up *order*, time every callee under every condition."""
    if order == "einloop first":
        load_einloop_first()
    elif order != "torch first":
        raise SystemExit(f"unknown order {order!r}")
    import torch
    import torch.nn.functional as F
    import einloop.torch as et
    from einloop import build
    from einloop.codegen.parallel import gomp_runtime
    from einloop.runtime import default_num_threads
    from common import per_call_median      # after the order's set-up: it imports einloop

    mm_decl, silu_decl = declarations()
    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(128, 512, generator=g), torch.randn(512, 512, generator=g)
    x = torch.randn(1024, 1024, generator=g)
    na, nb = torch.randn(128, 512, generator=g), torch.randn(512, 512, generator=g)
    ops = {"matmul 128x512x512": (et.custom_op("bench_threads::mm")(mm_decl), (a, w),
                                  lambda: torch.mm(a, w), python_op("mm", torch.mm, 2)),
           "SiLU 1024x1024": (et.custom_op("bench_threads::silu")(silu_decl), (x,),
                              lambda: F.silu(x), python_op("silu", F.silu, 1))}
    callees = {}
    for name, (op, args, reference, torch_op) in ops.items():
        out = op(*args)
        inputs, outputs = op.declaration(op.signature(args))
        kernel = build(op.schedule([*inputs, *outputs]), [*inputs, *outputs])
        if not kernel.parallel:
            raise SystemExit(f"{name}: the default schedule is not parallel; nothing to measure")
        buf = torch.empty_like(out)
        kernel(*args, buf)
        torch.testing.assert_close(buf, reference(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out, reference(), rtol=1e-4, atol=1e-4)
        callees[name, "op"] = lambda op=op, args=args: op(*args)
        callees[name, "kernel"] = lambda k=kernel, args=args, buf=buf: k(*args, buf)
        callees[name, "serial"] = lambda k=kernel, args=args, buf=buf: serial(k, args, buf)
        callees[name, "torch"] = reference
        callees[name, "torch op"] = lambda f=torch_op, args=args: f(*args)
    conditions = {"alone": (None, None),
                  "between mm": (lambda: torch.mm(na, nb), lambda: torch.mm(na, nb)),
                  "between gelu, softmax": (lambda: F.gelu(x), lambda: F.softmax(x, -1))}
    torch.mm(na, nb)                          # a PyTorch parallel region, then einloop's
    before = thread_ids()
    callees[next(iter(callees))]()
    shared = thread_ids() == before
    seen = set(before)
    times = {(c, cond): [] for c in callees for cond in conditions}
    for _ in range(rounds):
        for c, call in callees.items():
            for cond, (pre, post) in conditions.items():
                times[c, cond].append(per_call_median(call, pre, post, calls))
            seen |= thread_ids()
    rt = gomp_runtime()
    report = {"order": order, "maps": gomp_maps(),
              "runtime": [rt.library, rt.setting, rt.source.value] if rt else None,
              "torch threads": torch.get_num_threads(), "einloop threads": default_num_threads(),
              "one pool": shared,
              "threads created while measuring": len(seen - before), "results": []}
    for c in callees:
        alone = times[c, "alone"]
        report["results"].append({
            "operator": c[0], "callee": c[1], "alone us": statistics.median(alone) * 1e6,
            "ratios": {cond: statistics.median(al / t for al, t in zip(alone, times[c, cond]))
                       for cond in conditions if cond != "alone"}})
    return json.dumps(report)


def run(order, rounds, calls):
    code = MEASURE.format(here=HERE, order=order, rounds=rounds, calls=calls)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{order}: the measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_report(r):
    print(f"\n== {r['order']} ==")
    print("libgomp mapped: " + ", ".join(r["maps"]))
    lib, setting, source = r["runtime"] or ("(none)", "", "")
    print(f"einloop's kernels run on {lib} ({setting}; {source}); threads: torch "
          f"{r['torch threads']}, einloop {r['einloop threads']}")
    print(f"einloop's first kernel after a torch op started no thread (one pool): "
          f"{r['one pool']}; threads created "
          f"while measuring: {r['threads created while measuring']}")
    conds = list(r["results"][0]["ratios"])
    print(f"{'operator':<20} {'callee':<8} {'alone us':>9} " +
          " ".join(f"{c:>24}" for c in conds))
    for row in r["results"]:
        marks = [f"{row['ratios'][c]:>18.2f}" + (
            f" {'pass' if row['ratios'][c] >= TARGET else 'FAIL':>5}"
            if row["callee"] in ("op", "kernel") else " " * 6) for c in conds]
        print(f"{row['operator']:<20} {row['callee']:<8} {row['alone us']:>9.1f} "
              + " ".join(marks))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--orders", default=",".join(ORDERS))
    a = ap.parse_args(argv)
    orders = [o.strip() for o in a.orders.split(",") if o.strip()]
    bad = set(orders) - set(ORDERS)
    if bad:
        ap.error(f"unknown --orders {sorted(bad)}; choose from {', '.join(ORDERS)}")
    sys.path.insert(0, HERE)
    from common import cpu_description
    import torch
    print(cpu_description())
    print(f"torch {torch.__version__}; {a.rounds} interleaved rounds of {a.calls} calls per "
          f"condition; ratios alone / between (target for einloop >= {TARGET})")
    for order in orders:
        print_report(run(order, a.rounds, a.calls))
    print(f"\n(load average {', '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    main()
