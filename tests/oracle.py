"""The test oracle: run a schedule on random inputs and compare with NumPy (and the default)."""
import numpy as np

from einloop import build

RTOL = {"float32": 2e-4, "float64": 1e-9}


def random_inputs(tensors, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    out = []
    for t in tensors:
        if t.dtype.startswith("float"):
            a = rng.uniform(0.1 if positive else -1.0, 1.0, size=t.shape)
        else:
            a = rng.integers(-50, 50, size=t.shape)
        out.append(np.ascontiguousarray(a.astype(t.dtype)))
    return out


def run(s, inputs, outputs, arrays):
    """Build *s* for (inputs + outputs), run it on *arrays*, return the output arrays."""
    f = build(s, list(inputs) + list(outputs))
    results = [np.full(t.shape, np.nan if t.dtype.startswith("float") else 0, t.dtype)
               for t in outputs]
    f(*arrays, *results)
    return results


def check(s, inputs, outputs, reference, seed=0, positive=False):
    """Assert that schedule *s* computes what *reference* (NumPy) computes."""
    arrays = random_inputs(inputs, seed, positive)
    got = run(s, inputs, outputs, arrays)
    want = reference(*arrays)
    for g, w, t in zip(got, want, outputs):
        rtol = RTOL.get(t.dtype, 0)
        np.testing.assert_allclose(g, np.asarray(w, dtype=t.dtype), rtol=rtol, atol=rtol,
                                   err_msg=f"output {t.name}")
    return got
