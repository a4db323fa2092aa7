"""Single-head attention, float32, declared as a plain function: no template, no schedule.

``O = softmax(Q K^T / sqrt(D)) V``, written as the stages a NumPy user would write: the scores,
their row max, exp (of the scaled difference), row sum, divide, and the product with V.
Auto-schedule it:

    einloop tune examples/attention.py:attention --args 256 64 --trials 200

Run it (default schedule vs NumPy):  python examples/attention.py
"""
import numpy as np

from einloop import te


def attention(S, D):
    """Q, K, V (S x D) -> O (S x D); returns [Q, K, V, O] (inputs first, output last)."""
    Q = te.placeholder((S, D), name="Q")
    K = te.placeholder((S, D), name="K")
    V = te.placeholder((S, D), name="V")
    d = te.reduce_axis((0, D), name="d")
    # a reduction inside arithmetic gets its own stage (L.sum0); L scales it
    L = te.compute((S, S), lambda i, j: te.sum(Q[i, d] * K[j, d], axis=d) * (1.0 / D ** 0.5),
                   name="L")
    jm = te.reduce_axis((0, S), name="jm")
    Mx = te.compute((S,), lambda i: te.max(L[i, jm], axis=jm), name="Max")
    E = te.compute((S, S), lambda i, j: te.exp(L[i, j] - Mx[i]), name="E")
    js = te.reduce_axis((0, S), name="js")
    Sum = te.compute((S,), lambda i: te.sum(E[i, js], axis=js), name="Sum")
    P = te.compute((S, S), lambda i, j: E[i, j] / Sum[i], name="P")
    jv = te.reduce_axis((0, S), name="jv")
    O = te.compute((S, D), lambda i, e: te.sum(P[i, jv] * V[jv, e], axis=jv), name="O")
    return [Q, K, V, O]


def reference(q, k, v):
    """NumPy attention: the same stages."""
    scores = (q @ k.T) * np.float32(1.0 / q.shape[1] ** 0.5)
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v


if __name__ == "__main__":
    from einloop import build, create_schedule
    S, D = 256, 64
    Q, K, V, O = attention(S, D)
    f = build(create_schedule(O), [Q, K, V, O])
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((S, D), dtype=np.float32) for _ in range(3))
    out = np.empty((S, D), np.float32)
    f(q, k, v, out)
    np.testing.assert_allclose(out, reference(q, k, v), rtol=1e-4, atol=1e-5)
    t = f.time(q, k, v, out).median
    print(f"attention S={S} D={D} (default schedule): {t * 1e3:.3f} ms")
