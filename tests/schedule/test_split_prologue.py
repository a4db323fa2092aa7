"""Work on constant inputs split off a kernel (einloop/schedule/passes/split_prologue.py,
``einloop.codegen.build.build_split``).

A weight declared ``constant=True`` and packed at the root is packed by a prologue; the main
kernel reads the packed copy as an argument.  The prologue then the main kernel compute what the
whole kernel computes (checked against NumPy); work that is not on constants alone, or whose
output a kept statement writes, stays in the main kernel.
"""
import numpy as np
import pytest

from einloop import create_schedule, lower, te
from einloop.codegen.build import build, build_split
from einloop.errors import TEError
from einloop.schedule.passes.split_prologue import split_prologue
from einloop.te.dag import ComputeDAG
from einloop.te.tensor import constant_positions

import ops


def _dense(M=24, K=40, N=70, constant=True):
    """The ReLU linear layer of tests/ops.py: ``([W, b, x, y], the product stage)``."""
    inputs, (y,), _ = ops.linear_layer(M, K, N, constant, relu=True)
    (mm,) = [t for t in y.op.input_tensors if t.name == "mm"]
    return inputs + [y], mm


def _packed_schedule(tensors, mm, at_root=True):
    W, _, _, y = tensors
    s = create_schedule(y)
    packed = s.pack(W, 0, 16, readers=[s[mm]])
    i, j = s[y].op.axis
    jo, ji = s[y].split(j, factor=16)
    s[y].parallel(i)
    s[y].vectorize(ji)
    s[mm].compute_at(s[y], jo)
    if at_root:
        s[packed].parallel(s[packed].op.axis[0])
    else:
        s[packed].compute_at(s[y], i)
    return s


def _arrays(tensors, rng):
    return [rng.uniform(-1, 1, [int(d) for d in t.shape]).astype("float32") for t in tensors]


def _expected(W, b, x):
    return ops.linear_layer(relu=True)[2](W, b, x)[0]


def test_a_root_pack_of_a_constant_weight_becomes_the_prologue():
    tensors, mm = _dense()
    func = lower(_packed_schedule(tensors, mm), tensors)
    split = split_prologue(func, constant_positions(tensors))
    assert split is not None and split.sources == (0,) and split.hoisted == ("W.pack",)
    assert split.unread == (0,)                     # the main kernel reads the copy alone
    assert [b.name for b in split.prologue.args] == ["W", "W.pack"]
    assert split.prologue.attrs["outputs"] == ("W.pack",)
    assert [b.name for b in split.main.args] == ["W", "b", "x", "y", "W.pack"]
    assert "W.pack" not in [t.name for t in split.main.temps]
    assert "W.pack[" not in str(split.main).split("parallel for", 1)[0]   # no pack loop left
    assert "W[" not in str(split.main)                                    # reads the copy only


@pytest.mark.parametrize("shape", [(24, 40, 70), (5, 33, 17)])
def test_prologue_then_main_compute_what_the_whole_kernel_computes(shape):
    M, K, N = shape
    tensors, mm = _dense(M, K, N)
    s = _packed_schedule(tensors, mm)
    rng = np.random.default_rng(0)
    W, b, x, y = _arrays(tensors, rng)
    whole = build(s, tensors)
    whole(W, b, x, y)
    np.testing.assert_allclose(y, _expected(W, b, x), rtol=1e-5, atol=1e-5)
    split = build_split(s, tensors)
    assert split.prologue is not None and split.sources == (0,)
    spec = split.main.signature.args[-1]
    packed = np.full(spec.shape, np.nan, np.float32)
    split.prologue(W, packed)
    y2 = np.full_like(y, np.nan)
    split.main(W, b, x, y2, packed)
    np.testing.assert_array_equal(y2, y)
    # the prologue's output serves every call while W stays the same
    x2 = rng.uniform(-1, 1, x.shape).astype("float32")
    split.main(W, b, x2, y2, packed)
    np.testing.assert_allclose(y2, _expected(W, b, x2), rtol=1e-5, atol=1e-5)


def test_nothing_is_split_without_constants_or_with_the_pack_inside_the_loops():
    tensors, mm = _dense(constant=False)
    func = lower(_packed_schedule(tensors, mm), tensors)
    assert split_prologue(func, constant_positions(tensors)) is None
    assert build_split(_packed_schedule(tensors, mm), tensors).prologue is None
    tensors, mm = _dense()
    inside = lower(_packed_schedule(tensors, mm, at_root=False), tensors)
    assert split_prologue(inside, constant_positions(tensors)) is None


def test_a_constant_read_by_the_main_computation_alone_is_not_split():
    tensors, mm = _dense()
    s = create_schedule(tensors[-1])          # no pack: W is read in place
    assert split_prologue(lower(s, tensors), constant_positions(tensors)) is None


def test_constant_is_part_of_the_operators_identity():
    plain, _ = _dense(constant=False)
    const, _ = _dense()
    again, _ = _dense()
    h = [ComputeDAG([t[-1]]).structural_hash() for t in (plain, const, again)]
    assert h[0] != h[1] and h[1] == h[2]
    assert "constant" in repr(const[0].op) and "constant" not in repr(plain[0].op)
    assert constant_positions(const) == {0, 1} and constant_positions(plain) == set()


def test_constant_must_be_a_bool():
    with pytest.raises(TEError, match="constant must be True or False"):
        te.placeholder((4,), name="W", constant="yes")
