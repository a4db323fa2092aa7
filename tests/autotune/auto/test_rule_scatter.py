"""The scatter rule: a scatter stage is computed at the root, free axes parallel and vectorized,
its domain serial or privatized into per-core copies; random configs of random scatters (alone,
after an inlined stage, after a tiled GEMM and a dear elementwise stage) match NumPy."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from einloop import te, create_schedule
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.autotune.space.sketch.scatter_rules import PRIVATE_MIN_PART
from rule_ops import AVX2, kinds, steps_of
from oracle import run


def histogram(n, bins):
    X = te.placeholder((n,), "int32", name="X")
    H = te.histogram(X, bins, name="H")
    rng = np.random.default_rng(n)

    def arrays():
        return [rng.integers(-3, bins + 3, n).astype("int32")]
    return [X], [H], arrays, lambda x: [np.bincount(np.clip(x, 0, bins - 1), minlength=bins)]


def embedding_grad(n, vocab, dim):
    """An embedding's backward after an elementwise stage on the ids (inlined by the rules)."""
    ids = te.placeholder((n,), "int32", name="ids")
    dy = te.placeholder((n, dim), name="dy")
    wrapped = te.compute((n,), lambda j: ids[j] % vocab, name="wrapped")
    G = te.embedding_backward(wrapped, dy, vocab, name="G")
    rng = np.random.default_rng(n + dim)

    def arrays():
        return [rng.integers(0, 3 * vocab, n).astype("int32"),
                rng.standard_normal((n, dim)).astype("float32")]

    def ref(i, g):
        out = np.zeros((vocab, dim))
        np.add.at(out, i % vocab, g.astype("float64"))
        return [out]
    return [ids, dy], [G], arrays, ref


def gemm_exp_scatter(tokens, k, dim, vocab):
    """Rows of exp(X @ W / 10) scattered to their ids (a tiled GEMM and a dear elementwise stage
    feeding a scatter, as a mixture-of-experts combine)."""
    X = te.placeholder((tokens, k), name="X")
    W = te.placeholder((k, dim), name="W")
    ids = te.placeholder((tokens,), "int32", name="ids")
    r = te.reduce_axis((0, k), name="k")
    Y = te.compute((tokens, dim), lambda t, d: te.sum(X[t, r] * W[r, d], axis=r), name="Y")
    E = te.compute((tokens, dim), lambda t, d: te.exp(Y[t, d] * 0.1), name="E")
    G = te.embedding_backward(ids, E, vocab, name="G")
    rng = np.random.default_rng(tokens * k)

    def arrays():
        return [rng.standard_normal((tokens, k)).astype("float32"),
                rng.standard_normal((k, dim)).astype("float32"),
                rng.integers(0, vocab, tokens).astype("int32")]

    def ref(x, w, i):
        out = np.zeros((vocab, dim))
        np.add.at(out, i, np.exp((x.astype("float64") @ w) * 0.1))
        return [out]
    return [X, W, ids], [G], arrays, ref


def check_config(sp, index, ins, outs, arrays, ref):
    """Config *index* of space *sp* (None: its default steps) against NumPy."""
    steps = sp.default_steps() if index is None else sp.steps(index)
    s = create_schedule(outs).apply_steps(steps)
    data = arrays()
    for got, want in zip(run(s, ins, outs, data), ref(*data)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_long_histogram_is_privatized_per_core_and_the_copies_added_in_parallel():
    ins, outs, arrays, ref = histogram(2 * 2 * PRIVATE_MIN_PART + 37, 256)
    sp = generate_space(outs, AVX2)
    assert sp.fired["H"] == (RuleKind.SCATTER, RuleKind.PARALLEL_VECTORIZE_UNROLL)
    steps = steps_of(sp, H__private=2)
    assert kinds(steps, "H")[:2] == ["split", "rfactor"] and steps[0].args["nparts"] == 4
    assert kinds(steps, "H.rf") == ["parallel"]
    assert "vectorize" in kinds(steps, "H")
    assert not {"cache_write", "parallel"} & set(kinds(steps_of(sp, H__private=0)))
    for c in range(len(sp.config_space)):
        check_config(sp, c, ins, outs, arrays, ref)


def test_a_short_histogram_has_no_privatization_knob():
    ins, outs, arrays, ref = histogram(300, 16)
    sp = generate_space(outs, AVX2)
    assert len(sp.config_space) == 1 and sp.default_steps() == ()
    check_config(sp, 0, ins, outs, arrays, ref)


def test_embedding_backward_vectorizes_rows_inside_the_ids():
    ins, outs, arrays, ref = embedding_grad(40, 9, 37)
    sp = generate_space(outs, AVX2)
    assert RuleKind.INLINE in sp.fired["wrapped"] and RuleKind.SCATTER in sp.fired["G"]
    steps = steps_of(sp, G__vec=1)
    assert steps[-1].kind.value == "vectorize" and steps[-1].args["axis"] == "d.inner"
    reorder = next(s for s in steps if s.kind.value == "reorder")
    assert reorder.args["axes"] == ("b0", "d.outer", "d.inner")
    for c in range(len(sp.config_space)):
        check_config(sp, c, ins, outs, arrays, ref)


def test_strided_and_divided_reads_of_a_scatter_get_no_residue_prelude():
    """The residue rule rewrites a stage's reads (deinterleave, split_residues); a scatter's
    cannot be, so it is left out, and every config still matches NumPy."""
    ids = te.placeholder((50,), "int32", name="ids")
    dy = te.placeholder((100, 64), name="dy")
    j = te.reduce_axis((0, 50), name="j")
    G = te.scatter_reduce((11, 32), lambda d: ((ids[j // 2], d), dy[2 * j, 2 * d]), axis=j,
                          name="G")
    sp = generate_space([G], AVX2)
    assert sp.prelude == () and RuleKind.SCATTER in sp.fired["G"]
    rng = np.random.default_rng(3)

    def arrays():
        return [rng.integers(0, 11, 50).astype("int32"),
                rng.standard_normal((100, 64)).astype("float32")]

    def ref(i, g):
        out = np.zeros((11, 32))
        np.add.at(out, i[np.arange(50) // 2], g[::2, ::2].astype("float64"))
        return [out]
    for c in range(len(sp.config_space)):
        check_config(sp, c, [ids, dy], [G], arrays, ref)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_configs_of_random_scatters_match_numpy(data):
    kind = data.draw(st.sampled_from(["histogram", "embedding", "gemm"]), label="operator")
    if kind == "histogram":
        op = histogram(data.draw(st.integers(1, 3000), label="n"),
                       data.draw(st.integers(1, 300), label="bins"))
    elif kind == "embedding":
        op = embedding_grad(data.draw(st.integers(1, 1200), label="n"),
                            data.draw(st.integers(1, 20), label="vocab"),
                            data.draw(st.integers(1, 40), label="dim"))
    else:
        op = gemm_exp_scatter(*(data.draw(st.integers(1, hi), label=name) for name, hi in
                                (("tokens", 40), ("k", 16), ("dim", 24), ("vocab", 7))))
    ins, outs, arrays, ref = op
    sp = generate_space(outs, AVX2)
    index = data.draw(st.integers(0, len(sp.config_space) - 1), label="config")
    check_config(sp, index, ins, outs, arrays, ref)
    check_config(sp, None, ins, outs, arrays, ref)
