"""The arena plan of a kernel sequence: buffers alive at a common step never share bytes,
buffers that are not do, and every offset is aligned."""
import pytest
from hypothesis import given, settings, strategies as st

from einloop.errors import InternalError
from einloop.runtime.arena import ALIGNMENT, Lifetime, plan_arena


def _check(buffers, plan):
    assert len(plan.offsets) == len(buffers)
    for i, (a, oa) in enumerate(zip(buffers, plan.offsets)):
        assert oa % ALIGNMENT == 0 and oa + a.nbytes <= plan.nbytes
        for b, ob in zip(buffers[i + 1:], plan.offsets[i + 1:]):
            if a.first <= b.last and b.first <= a.last and a.nbytes and b.nbytes:
                assert oa + a.nbytes <= ob or ob + b.nbytes <= oa, (a, oa, b, ob)


def test_buffers_alive_together_are_disjoint_and_the_others_share():
    buffers = [Lifetime(1000, 0, 1), Lifetime(1000, 1, 2), Lifetime(1000, 2, 3),
               Lifetime(100, 3, 3)]
    plan = plan_arena(buffers)
    _check(buffers, plan)
    assert plan.offsets[0] == plan.offsets[2]          # steps 0-1 and 2-3: the same bytes
    assert plan.offsets[3] == plan.offsets[1]          # step 3 reuses what step 2 freed
    assert plan.nbytes == 2 * 1024                      # not the sum, 3,100 bytes aligned


def test_an_empty_plan_and_a_bad_lifetime():
    assert plan_arena([]) == ((), 0)
    with pytest.raises(InternalError, match="from step 3 to 1"):
        plan_arena([Lifetime(8, 3, 1)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 9), st.integers(0, 4)),
                max_size=25))
def test_random_lifetimes_never_overlap_while_alive(raw):
    buffers = [Lifetime(n, first, first + span) for n, first, span in raw]
    plan = plan_arena(buffers)
    _check(buffers, plan)
    # never worse than placing every buffer after the other
    assert plan.nbytes <= sum(-(-max(b.nbytes, 1) // ALIGNMENT) * ALIGNMENT for b in buffers)
