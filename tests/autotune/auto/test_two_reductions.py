"""Two reductions that read one input and feed one consumer (a SwiGLU MLP: silu(X @ W1) *
(X @ W3)): each may pack the shared input, and each copy is read by its own reduction only,
so every config of the space builds (before, a pack redirected both reductions to one copy,
computed in one of their loops, and over half of the configs were refused)."""
import random

import ops
from rule_ops import AVX2, check_steps
from einloop import lower
from einloop.autotune.space.sketch import generate_space
from einloop.schedule.replay import replay


def test_100_configs_of_the_swiglu_space_all_lower():
    """100 random configs of the issue's space, each lowered with unrolled loops kept as loops
    (every legality check runs; expanding them only copies bodies, at three times the cost), the
    first 10 also expanded as a build does.  Before the fix over half of the configs were
    refused, so with the fix undone all 100 would lower with odds below 2**-100: the issue's 200
    configs show it no better, in twice the time."""
    ins, outs, _ = ops.swiglu(128, 1024, 2816)          # the sizes
    sp = generate_space(outs, AVX2)
    rng = random.Random(0)
    failed = []
    for n, index in enumerate(rng.sample(range(len(sp.config_space)), 100)):
        try:
            lower(replay(sp.steps(index), outs), ins + outs, expand_unroll=n < 10)
        except Exception as exc:                          # noqa: BLE001 -- counted, then shown
            failed.append((index, f"{type(exc).__name__}: {exc}"))
    assert not failed, failed[:3]


def test_configs_that_pack_the_shared_input_for_both_reductions_compute_swiglu():
    ins, outs, ref = ops.swiglu()
    sp = generate_space(outs, AVX2)
    rng = random.Random(1)
    both = 0
    for index in rng.sample(range(len(sp.config_space)), 400):
        steps = sp.steps(index)
        packs = [st for st in steps if st.kind.value == "pack" and st.stage == "X"]
        if len(packs) == 2:
            assert sorted(st.args["readers"] for st in packs) == [("G",), ("U",)]
            check_steps(steps, ins, outs, ref, rtol=1e-4)
            both += 1
            if both == 4:
                break
    assert both == 4
