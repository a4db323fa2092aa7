"""The dot sketch: a linear layer with few rows, ``x @ W.T`` with W as PyTorch stores it ([out,
in]), may be computed as dot products (both operands read in place along the reduction, a
register tile of rows x columns partial sums) instead of tiling the columns, which needs W
copied transposed on every call.  The rule fires only on that shape of product; every tile it
offers fits the target's registers and computes what the default schedule computes.  Targets
are explicit, so the spaces are the same on any host."""
import numpy as np
import pytest

from einloop import build, create_schedule, nn, te
from einloop.autotune.space.sketch.rules import DOT_MAX_ROWS
from einloop.autotune.task.auto import AutoTask

AVX512, AVX2 = "llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"


def linear(rows, k=64, n=40, transposed=True):
    x = te.placeholder((rows, k), name="x")
    if transposed:                              # W [n, k]: read along k, as torch stores it
        w = te.placeholder((n, k), name="w")
        r = te.reduce_axis((0, k), name="r")
        y = te.compute((rows, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="y")
    else:                                       # W [k, n]: read along n
        w = te.placeholder((k, n), name="w")
        r = te.reduce_axis((0, k), name="r")
        y = te.compute((rows, n), lambda i, j: te.sum(x[i, r] * w[r, j], axis=r), name="y")
    return [x, w, nn.gelu(y, name="act")]


def _knobs(tensors, target):
    return AutoTask.of_tensors(tensors, target).sketch.config_space.knobs


def test_the_rule_fires_on_a_few_rows_read_along_the_reduction_only():
    assert "y.dot" in _knobs(linear(8), AVX512)
    assert [e.val for e in _knobs(linear(8), AVX512)["y.sketch"].entities][-1] == "dot"
    assert "y.dot" not in _knobs(linear(8, transposed=False), AVX512)    # W read along n
    assert "y.dot" not in _knobs(linear(DOT_MAX_ROWS + 1), AVX512)      # rows enough to pack
    assert "y.dot" not in _knobs(linear(8, k=40), AVX512)               # k: no whole vectors


@pytest.mark.parametrize("target, registers", [(AVX512, 32), (AVX2, 16)])
def test_every_tile_fits_the_registers_and_the_rows(target, registers):
    tiles = [e.val for e in _knobs(linear(3), target)["y.dot"].entities]
    assert tiles and all(r <= 3 and r * c + r + 1 <= registers for r, c in tiles)


@pytest.mark.parametrize("rows", [1, 5, 16])
def test_every_dot_config_computes_what_the_default_schedule_computes(rows):
    tensors = linear(rows)
    task = AutoTask.of_tensors(tensors, AVX512)
    cs = task.sketch.config_space
    names = list(cs.knobs)
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 64), dtype=np.float32)
    w = rng.standard_normal((40, 64), dtype=np.float32)
    want = np.empty((rows, 40), np.float32)
    build(create_schedule(tensors[-1].op), tensors)(x, w, want)
    tiles = cs.knobs["y.dot"].entities
    for t in range(len(tiles)):
        point = [int(rng.integers(len(k.entities))) for k in cs.knobs.values()]
        point[names.index("y.sketch")] = [e.val for e in cs.knobs["y.sketch"].entities].index("dot")
        point[names.index("y.dot")] = t
        s, args = task.instantiate(cs.index_of(point))
        got = np.full((rows, 40), np.nan, np.float32)
        build(s, args)(x, w, got)                   # built for this host
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(tiles[t].val))


def test_the_seeds_try_the_dot_sketch():
    task = AutoTask.of_tensors(linear(8), AVX512)
    seeds = task.seed_configs(8)
    assert any(c.entities["y.sketch"].val == "dot" for c in seeds)
