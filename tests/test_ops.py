"""Every operator of the zoo, under the default and several non-trivial schedules, vs NumPy."""
import pytest

import ops
import strategies
from oracle import check

POSITIVE = {"layer_norm"}


@pytest.mark.parametrize("strategy", strategies.ALL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("op", sorted(ops.ZOO))
def test_operator_matches_numpy(op, strategy):
    inputs, outputs, ref = ops.ZOO[op]()
    check(strategy(outputs), inputs, outputs, ref, positive=op in POSITIVE)


@pytest.mark.parametrize("strategy", strategies.ALL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("subscripts,shapes", ops.EINSUMS, ids=[e[0] for e in ops.EINSUMS])
def test_einsum_matches_numpy(subscripts, shapes, strategy):
    inputs, outputs, ref = ops.einsum(subscripts, shapes)
    check(strategy(outputs), inputs, outputs, ref)
