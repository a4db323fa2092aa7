"""No candidate inlines an exponential into a loop that repeats it: in causal attention
``e = exp(s - max)`` is read by ``att[b, i, c] = sum_j e[b, i, j] * v[b, j, c]``, which would
compute each exponential once per ``c`` (issue 23: a candidate that did ran past the timeout).
A cheap branch (conv2d's padding) may still be inlined into the loops that repeat it."""
import random

import ops
from rule_ops import AVX2
from einloop import lower, te
from einloop.autotune.space.sketch import generate_space
from einloop.autotune.space.sketch.analysis import DagAnalysis
from einloop.ir import expr as E
from einloop.ir.stmt import Store
from einloop.ir.visit import walk, walk_stmt
from einloop.schedule.replay import replay


def causal_attention(h=2, s=19, d=12):
    q, k, v = (te.placeholder((h, s, d), name=n) for n in "qkv")
    return [q, k, v], [ops.causal_multihead_attention(q, k, v)]


def exp_in_stores_to(stmt, prefix):
    return [s.buffer.name for s in walk_stmt(stmt) if isinstance(s, Store)
            and s.buffer.name.startswith(prefix)
            and any(isinstance(x, E.Call) and x.name == "exp" for x in walk(s.value))]


def test_the_exponential_of_attention_is_never_inlined_into_the_output_reduction():
    ins, outs = causal_attention()
    an = DagAnalysis(outs, AVX2)
    e = next(op for op in an.dag.compute_ops if op.name == "e")
    assert an.repeats_when_inlined(e)
    sp = generate_space(outs, AVX2)
    assert "e.inline" not in sp.config_space.knobs
    rng = random.Random(0)
    for _ in range(60):
        index = rng.randrange(sp.config_space.size)
        stmt = lower(replay(sp.steps(index), outs), ins + outs).body
        assert not exp_in_stores_to(stmt, "att"), index


def test_a_cheap_branch_is_still_inlinable_where_it_repeats():
    ins, outs, _ = ops.conv2d()
    an = DagAnalysis(outs, AVX2)
    pad = next(op for op in an.dag.compute_ops if op.name == "Pad")
    assert an.repeats_when_inlined(pad) and not an.dag.has_expensive_call(pad)
    assert "Pad.inline" in generate_space(outs, AVX2).config_space.knobs
