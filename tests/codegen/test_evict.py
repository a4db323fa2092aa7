"""Cold-cache measurement: ``evict`` pushes arrays out of the caches without touching their
values, ``time_callable(before=)`` leaves the eviction out of the time, and
``measure_option(cache_flush=True)`` times every candidate that way, and
``cache_flush=CacheFlush.CONSTANTS`` (what ``tune_model`` measures with) evicts only a model's
weights: the constant inputs and the packed copies a split candidate reads."""
import numpy as np
import pytest

from einloop import autotune, build, te
from einloop.autotune.measure.runner import arrays_to_evict
from einloop.codegen import evict as E
from einloop.errors import TuningError
from einloop.runtime.timing import time_callable

import ops


@pytest.mark.parametrize("n", [0, 1, 63, 64, 1000, 1 << 18])
def test_evicting_arrays_of_any_size_keeps_their_values(n):
    rng = np.random.default_rng(n)
    arrays = [rng.random(n).astype("float32"), rng.integers(0, 9, (n, 3)).astype("int8"),
              rng.random((n, 2))[:, 0]]                       # a strided view
    before = [a.copy() for a in arrays]
    E.evict(arrays)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)


def test_the_portable_fallback_writes_its_scratch_buffer(monkeypatch):
    """Where clflush is not available (not x86), a scratch buffer twice the fallback size is
    written instead."""
    monkeypatch.setattr(E, "_x86", False)
    monkeypatch.setattr(E, "_scratch", None)
    monkeypatch.setattr(E, "FALLBACK_CACHE_BYTES", 1 << 16)
    a = np.ones(10, np.float32)
    E.evict([a])
    assert E._scratch.nbytes == 2 << 16 and E._scratch.min() == 1
    assert (a == 1).all()


def test_time_before_each_call_is_left_out(monkeypatch):
    """On a clock that the function moves by 1 and *before* by 1000, each call measures 1."""
    import einloop.runtime.timing as timing
    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])

    def tick(dt):
        def move():
            now[0] += dt
        return move
    t = time_callable(tick(1.0), number=3, repeat=2, warmup=0, before=tick(1000.0))
    assert t.results == (1.0, 1.0) and t.number == 3


def test_cache_flush_is_checked_and_measures_candidates(tmp_path):
    with pytest.raises(TuningError, match="cache_flush must be True .every argument., False "
                                          "or a CacheFlush"):
        autotune.measure_option(cache_flush="yes")
    from einloop.autotune.measure.common import runner_options   # what the runner reads
    assert runner_options(autotune.measure_option(cache_flush=True))["cache_flush"] \
        is autotune.CacheFlush.ALL
    assert runner_options(autotune.measure_option())["cache_flush"] is autotune.CacheFlush.NONE
    assert autotune.measure_option(cache_flush=autotune.CacheFlush.CONSTANTS).cache_flush \
        is autotune.CacheFlush.CONSTANTS
    A = te.placeholder((4096,), name="A")
    B = te.compute((4096,), lambda i: A[i] * 2.0 + 1.0, name="B")
    log = str(tmp_path / "cold.jsonl")
    s, args = autotune.auto_schedule([A, B], n_trial=3, quiet=True, log=log,
                                     measure_option=autotune.measure_option(cache_flush=True))
    records = autotune.load_log(log)
    assert records and all(r.ok and r.mean_cost > 0 for r in records)
    f = build(s, args)
    a = np.arange(4096, dtype=np.float32)
    b = np.empty_like(a)
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1)


def test_a_flush_of_constants_evicts_the_weights_and_their_packed_copies():
    # [W, b, x, y] of a dense layer, W and b constant, and W's packed copy after them
    arrays = [np.zeros(i + 1) for i in range(5)]
    flush = autotune.CacheFlush
    pick = [id(a) for a in arrays_to_evict(flush.CONSTANTS, arrays, 4, (0, 1))]
    assert pick == [id(arrays[0]), id(arrays[1]), id(arrays[4])]
    assert [id(a) for a in arrays_to_evict(flush.ALL, arrays, 4, (0, 1))] == list(map(id, arrays))
    assert arrays_to_evict(flush.NONE, arrays, 4, (0, 1)) == []


def test_a_model_task_tuned_with_its_weights_evicted(tmp_path):
    inputs, outputs, _ = ops.linear_layer(64, 48, 80, True)
    log = str(tmp_path / "weights.jsonl")
    option = autotune.measure_option(cache_flush=autotune.CacheFlush.CONSTANTS)
    s, args = autotune.auto_schedule(inputs + outputs, n_trial=4, quiet=True, log=log, seed=0,
                                     measure_option=option)
    records = autotune.load_log(log)
    assert records and any(r.ok for r in records)
    assert not [r for r in records if r.error_no in (autotune.MeasureErrorNo.WRONG_ANSWER,
                                                     autotune.MeasureErrorNo.RUNTIME_ERROR)]
