"""Scan benchmark: cumulative sums of a 4096 x 4096 float32 matrix against a copy of it.

A cumulative sum reads and writes each element once, as a copy does, so the schedule the
auto-scheduler gives a scan (``einloop.autotune.space.sketch.scan_loops``) should stream at
about copy bandwidth: down the rows, wide parallel column blocks with the scan loop serial in
each; along the rows, the rows in parallel.  Prints milliseconds, GB/s (read + write) and the
time of an einloop copy (parallel rows, vectorized) over the scan's; NumPy's cumsum and copy
for reference (one thread).  Along the rows each row is one chain of dependent adds, which a
second row interleaved in the same thread does not speed up (measured: 4, 8 or 16 rows side by
side, unrolled or in vector lanes, were slower: they stride across rows).

    .venv/bin/python benchmarks/bench_scan.py
"""
import numpy as np

from common import median_time, setup_peers, versus
from einloop import build, create_schedule, te
from einloop.autotune.space.sketch import MachineModel, generate_space

N = 4096


def default_kernel(out):
    """The auto-scheduler's default schedule of *out* (no tuning), built."""
    sp = generate_space(out, MachineModel.of("llvm"))
    s = create_schedule(out).apply_steps(sp.default_steps())
    return build(s, [out.op.input_tensors[0], out]), s


def copy_kernel(X):
    Y = te.compute(X.shape, lambda i, j: X[i, j], name="copy")
    s = create_schedule(Y)
    i, j = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=16)
    s[Y].parallel(i)
    s[Y].vectorize(ji)
    return build(s, [X, Y])


def main():
    setup_peers()
    x = np.random.default_rng(0).uniform(-1, 1, (N, N)).astype("float32")
    y = np.empty_like(x)
    X = te.placeholder((N, N), name="X")
    copy = copy_kernel(X)
    gb = 2 * x.nbytes / 1e9
    print(f"{'kernel':<28} {'ms':>8} {'GB/s':>7} {'copy/scan':>10}")
    for axis in (0, 1):
        f, s = default_kernel(te.cumsum(X, axis=axis))
        f(x, y)
        np.testing.assert_allclose(y, np.cumsum(x, axis, dtype="float64"), rtol=1e-3, atol=2e-2)
        scan_t, copy_t, ratio = versus(lambda: f(x, y), lambda: copy(x, y), number=5)
        print(f"{f'cumsum axis {axis} (default)':<28} {scan_t * 1e3:8.2f} {gb / scan_t:7.1f} "
              f"{1 / ratio:10.2f}")
        print(f"{'  einloop copy':<28} {copy_t * 1e3:8.2f} {gb / copy_t:7.1f}")
        print("  " + "\n  ".join(str(s).splitlines()[1:]))
    for name, fn in (("numpy cumsum axis 0", lambda: np.cumsum(x, 0, out=y)),
                     ("numpy copyto", lambda: np.copyto(y, x))):
        t, _ = median_time(fn, 2, 3)
        print(f"{name:<28} {t * 1e3:8.2f} {gb / t:7.1f}")


if __name__ == "__main__":
    main()
