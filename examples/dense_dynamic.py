"""A dense layer whose batch size changes from call to call: one kernel for every batch size.

``n = te.size_var("n")`` is a symbolic extent: the kernel is compiled once and takes ``n`` from
the arrays of each call.  Tuning measures it at the sizes you name and keeps one schedule per
size; each call runs the schedule tuned nearest its batch size.

    einloop tune examples/dense_dynamic.py:dense --args 1024 1024 --trials 200 \\
        --shape-hints n=1,16,256,2048

Run it:  python examples/dense_dynamic.py
"""
import numpy as np

from einloop import te, build, autotune


def dense(K=1024, N=1024):
    """Y[n, N] = X[n, K] @ W[K, N] + b[N], with the batch size n symbolic."""
    n = te.size_var("n")
    X = te.placeholder((n, K), name="X")
    W = te.placeholder((K, N), name="W")
    b = te.placeholder((N,), name="b")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((n, N), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k) + b[j], name="Y")
    return [X, W, b, Y]


def main():
    log = "tuning_logs/dense_dynamic.jsonl"
    tensors = dense(256, 256)
    d, args = autotune.auto_schedule(tensors, n_trial=32, shape_hints={"n": [1, 64, 512]},
                                     log=log)
    f = build(d, args)
    rng = np.random.default_rng(0)
    w, b = rng.random((256, 256), dtype=np.float32), rng.random(256, dtype=np.float32)
    for n in (1, 7, 100, 1000):
        x = rng.random((n, 256), dtype=np.float32)
        y = np.empty((n, 256), np.float32)
        f(x, w, b, y)
        print(f"n={n:5d}: max error vs NumPy {np.abs(y - (x @ w + b)).max():.2e}")
    print(f)


if __name__ == "__main__":
    main()
