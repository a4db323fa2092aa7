"""Measurement: build worker pool and runner, error kinds, crash isolation, lifetime.

Most checks share one Measurer (module fixture) because starting its processes costs about a
second; the lifetime tests start their own.  The runner crash uses the ``EINLOOP_RUNNER_FAULT``
test hook (a real SIGSEGV in the runner process); wrong answers, slow runs, slow builds and
build-worker crashes are produced for real by the template's knobs (measure_templates.py).
"""
import gc
import math
import multiprocessing
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import measure_templates as mt          # importable by name in the build workers
from einloop import autotune, build, lower
from einloop.autotune.measure import builder as B
from einloop.autotune.measure import runner as R
from einloop.autotune.measure.common import (MeasureErrorNo as E, MeasureOption, MeasureResult,
                                             measure_option)
from einloop.autotune.measure.local import Measurer
from einloop.autotune.measure.runner import FAULT_ENV, compare, parse_faults
from einloop.autotune.task.create import create_task
from einloop.codegen import cache, jit
from einloop.codegen.shipped import ShippedKernel, load, ship
from einloop.runtime import Kernel
from einloop.errors import TuningError

TIMEOUT = 3.0           # seconds per candidate run and per build in the shared Measurer


@pytest.fixture(scope="module")
def task():
    return create_task("measure_test_gemm", (mt.N,))


def idx(task, **choices):
    return mt.config_index(task, **choices)


@pytest.fixture(scope="module")
def crash_configs(task):
    return {"segfault": idx(task, tile_i=[-1, 1], tile_j=[-1, 1]),
            "raise": idx(task, tile_i=[-1, 1], tile_j=[-1, 2]),
            "abort": idx(task, tile_i=[-1, 1], tile_j=[-1, 4])}


@pytest.fixture(scope="module")
def measurer(task, crash_configs):
    faults = ",".join(f"{k}:{v}" for k, v in crash_configs.items())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAULT_ENV, faults)
        m = Measurer(task, measure_option(number=2, repeat=3, timeout=TIMEOUT,
                                          build_timeout=TIMEOUT, n_parallel=2))
        try:
            yield m
        finally:
            m.close()


def codes(results):
    return [r.error_no for r in results]


# one shared Measurer ---------------------------------------------------------------------------

def test_valid_wrong_and_invalid_configs(task, measurer):
    configs = [idx(task, tile_i=[-1, 4], tile_j=[-1, 8]),
               task.config_space.get(idx(task, tile_i=[-1, 8], tile_j=[-1, 16])),
               idx(task, add=1.0),
               idx(task, mode="bad_schedule")]
    res = measurer.measure_batch(configs)
    assert codes(res) == [E.NO_ERROR, E.NO_ERROR, E.WRONG_ANSWER, E.INSTANTIATION_ERROR]
    for r in res[:2]:
        assert len(r.costs) == 3 and all(c > 0 for c in r.costs)
        assert r.error_msg == "" and 0 < r.mean_cost < 0.1 and r.all_cost > 0
        assert abs(r.timestamp - time.time()) < 60
    wrong = res[2]
    assert wrong.costs == () and math.isinf(wrong.mean_cost)
    assert "output C" in wrong.error_msg and "max abs error" in wrong.error_msg
    assert "ScheduleError" in res[3].error_msg and "already split" in res[3].error_msg
    assert "Traceback" in res[3].error_msg


def test_runner_crash_is_isolated(task, measurer, crash_configs):
    before = measurer.child_pids()["runner"]
    ok1, ok2 = idx(task, tile_i=[-1, 2], tile_j=[-1, 4]), idx(task, tile_i=[-1, 16])
    res = measurer.measure_batch([ok1, crash_configs["segfault"], ok2, crash_configs["raise"],
                                  crash_configs["abort"], ok1])
    assert codes(res) == [E.NO_ERROR, E.RUNTIME_ERROR, E.NO_ERROR, E.RUNTIME_ERROR,
                          E.RUNTIME_ERROR, E.NO_ERROR]
    assert "SIGSEGV" in res[1].error_msg and "runner process died" in res[1].error_msg
    assert "injected failure" in res[3].error_msg and "Traceback" in res[3].error_msg
    assert "SIGABRT" in res[4].error_msg
    assert measurer.child_pids()["runner"] != before        # a new runner took over


def test_run_timeout_then_the_job_goes_on(task, measurer):
    t0 = time.monotonic()
    res = measurer.measure_batch([idx(task, mode="slow_run"), idx(task, tile_j=[-1, 2])])
    assert codes(res) == [E.TIMEOUT, E.NO_ERROR]
    assert "timeout=3 s" in res[0].error_msg and "killed" in res[0].error_msg
    assert TIMEOUT <= res[0].all_cost < TIMEOUT + 5
    assert time.monotonic() - t0 < TIMEOUT + 15


def test_build_timeout_and_build_worker_crash(task, measurer):
    res = measurer.measure_batch([idx(task, mode="crash_build"), idx(task, tile_i=[-1, 4]),
                                  idx(task, mode="slow_build"), idx(task, tile_j=[-1, 16])])
    assert codes(res) == [E.COMPILE_ERROR, E.NO_ERROR, E.COMPILE_TIMEOUT, E.NO_ERROR]
    assert "build worker process died" in res[0].error_msg and "SIGSEGV" in res[0].error_msg
    assert res[2].error_msg.startswith("build timed out")
    assert measurer.restarts["builder"] >= 2


def test_every_build_failure_is_recorded_and_the_job_goes_on(monkeypatch):
    """Builds that really sleep, really compute (holding the GIL) or raise what is not an
    einloop error (SystemExit, MemoryError, RecursionError included) are results, not raised."""
    monkeypatch.delenv(FAULT_ENV, raising=False)      # the shared Measurer's runner faults
    faults = create_task("measure_test_build_faults", (16,))
    index = {f: idx(faults, fault=f) for f in mt.BUILD_FAULTS}
    order = ["sleep", "none", "busy", "zero_division", "memory", "recursion", "exit", "none"]
    with Measurer(faults, measure_option(number=1, repeat=1, timeout=10, build_timeout=2,
                                         n_parallel=2)) as m:
        res = m.measure_batch([index[f] for f in order])
        restarts = m.restarts["builder"]
    assert codes(res) == [E.COMPILE_TIMEOUT, E.NO_ERROR, E.COMPILE_TIMEOUT] \
        + [E.INSTANTIATION_ERROR] * 4 + [E.NO_ERROR]
    for r in (res[0], res[2]):
        assert r.error_msg.startswith("build timed out") and "build_timeout=2 s" in r.error_msg
    for r, name in zip(res[3:7], ["ZeroDivisionError", "MemoryError", "RecursionError",
                                  "SystemExit: 3"]):
        assert name in r.error_msg and "Traceback" in r.error_msg
    assert restarts >= 2                     # each timed-out worker was killed and replaced


def test_bad_config_arguments(task, measurer):
    with pytest.raises(TuningError, match=r"config index 250 is outside the space"):
        measurer.measure_batch([250])
    with pytest.raises(TuningError, match="ConfigEntity objects or config indices"):
        measurer.measure_batch(["3"])
    assert not measurer.closed
    assert measurer.measure_batch([]) == []


# lifetime --------------------------------------------------------------------------------------

def _tracker_pid():
    from multiprocessing import resource_tracker
    return getattr(resource_tracker._resource_tracker, "_pid", None)


def _children():
    """Pids of this process's children (zombies included), from /proc."""
    me, out = os.getpid(), set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.add(int(d))
    return out - {_tracker_pid()}


def _assert_gone(pids, before):
    """No child process started since *before* (``_children()`` then) is left, not even a
    zombie; the shared Measurer's processes may still run."""
    assert {p.pid for p in multiprocessing.active_children()} <= before
    deadline = time.monotonic() + 5
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children() - before == set()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"process {pid} is still there (zombie?)"


def _small_option(**kw):
    return measure_option(number=1, repeat=1, n_parallel=1, **kw)


def test_close_leaves_no_processes(task):
    before = _children()
    with Measurer(task, _small_option(check_correctness=False)) as m:
        pids = m.child_pids()
        assert pids["runner"] and len(pids["builders"]) == 1
        res = m.measure_batch([idx(task, tile_i=[-1, 4]), idx(task, add=1.0)])
        assert codes(res) == [E.NO_ERROR, E.NO_ERROR]       # the wrong answer goes unnoticed
    assert m.closed
    m.close()                                    # idempotent
    _assert_gone([pids["runner"], *pids["builders"]], before)
    with pytest.raises(TuningError, match="closed"):
        m.measure_batch([0])


def test_garbage_collection_closes(task):
    before = _children()
    m = Measurer(task, _small_option())
    pids = m.child_pids()
    del m
    gc.collect()
    _assert_gone([pids["runner"], *pids["builders"]], before)


def test_keyboard_interrupt_closes(task):
    before = _children()
    m = Measurer(task, _small_option(timeout=60))
    pids = m.child_pids()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            m.measure_batch([idx(task, mode="slow_run")])
    finally:
        timer.cancel()
    assert m.closed
    _assert_gone([pids["runner"], *pids["builders"]], before)


def test_failing_fallback_raises():
    before = _children()
    t = create_task("measure_test_broken", (16,))
    with pytest.raises(TuningError, match=r"fallback config .* failed to build:[\s\S]*already "
                                          r"split"):
        Measurer(t, _small_option())
    _assert_gone([], before)


# options and results ---------------------------------------------------------------------------

def test_measure_option_defaults():
    o = measure_option()
    assert isinstance(o, MeasureOption)
    assert (o.number, o.repeat, o.timeout, o.effective_build_timeout) == (5, 3, 10.0, 10.0)
    assert o.build_workers == os.cpu_count() and o.overlap is True
    assert measure_option(timeout=2, build_timeout=7).effective_build_timeout == 7.0
    with pytest.raises(Exception):
        o.number = 3                             # frozen


@pytest.mark.parametrize("kw,pattern", [
    ({"number": 0}, r"number must be an int >= 1, got 0"),
    ({"repeat": 2.5}, r"repeat must be an int >= 1, got 2.5"),
    ({"number": True}, r"number must be an int >= 1"),
    ({"min_repeat_ms": -1}, r"min_repeat_ms must be a number >= 0"),
    ({"timeout": 0}, r"timeout must be a number of seconds > 0"),
    ({"timeout": float("inf")}, r"timeout must be a number of seconds > 0"),
    ({"build_timeout": -2}, r"build_timeout must be None \(use timeout\) or a number"),
    ({"n_parallel": 0}, r"n_parallel must be None \(the CPU count\) or an int >= 1"),
    ({"check_correctness": 1}, r"check_correctness must be True or False"),
    ({"overlap": "yes"}, r"overlap must be True or False"),
    ({"rtol": -1e-3}, r"rtol must be a number >= 0"),
    ({"atol": "1e-5"}, r"atol must be a number >= 0"),
    ({"cooldown_s": float("nan")}, r"cooldown_s must be a number >= 0"),
])
def test_measure_option_validation(kw, pattern):
    with pytest.raises(TuningError, match="measure_option: " + pattern):
        measure_option(**kw)


def test_measurer_rejects_other_options(task):
    with pytest.raises(TuningError, match="option must come from measure_option"):
        Measurer(task, {"timeout": 1})


def test_measure_result():
    r = MeasureResult((1e-3, 3e-3), E.NO_ERROR, "", 0.5, 0.0)
    assert r.ok and r.mean_cost == pytest.approx(2e-3) and "2.0000 ms" in repr(r)
    bad = MeasureResult((), E.TIMEOUT, "no result\nwithin 3 s", 3.2, 0.0)
    assert not bad.ok and math.isinf(bad.mean_cost) and "TIMEOUT: within 3 s" in repr(bad)
    assert [int(e) for e in E] == list(range(8))


def test_compare_and_fault_parsing():
    ref = np.array([1.0, 2.0, 100.0], np.float32)
    assert compare("C", ref + 1e-3, ref, rtol=1e-4, atol=1e-5) is None    # 1e-3 < 1e-4 * 100
    msg = compare("C", np.array([1.0, np.nan, 100.0], np.float32), ref, 1e-4, 1e-5)
    assert "1 of 3 elements differ" in msg and "not written" in msg
    msg = compare("C", ref + np.float32([0, 0.5, 0]), ref, 1e-4, 1e-5)
    assert "max abs error 0.5 at index (1,)" in msg
    ints = np.arange(4, dtype=np.int32)
    assert compare("I", ints.copy(), ints, 0, 0) is None
    assert "1 of 4 elements differ" in compare("I", ints + [0, 0, 1, 0], ints, 0, 0)
    assert parse_faults("segfault:3, hang:5") == {3: "segfault", 5: "hang"}
    assert parse_faults(None) == {}
    with pytest.raises(ValueError, match="bad entry 'boom:1'"):
        parse_faults("boom:1")


# shipped kernels and the compile cache ------------------------------------------------------------

def test_shipped_kernel_pickles_loads_and_matches_build(task):
    s, args = task.instantiate(idx(task, tile_i=[-1, 4], tile_j=[-1, 8]))
    func = lower(s, args, name="gemm")
    sk = ship(func, "llvm")
    assert isinstance(sk, ShippedKernel)
    assert [a.name for a in sk.args] == ["A", "B", "C"] and sk.outputs == ("C",)
    assert [a.name for a in sk.inputs] == ["A", "B"] and sk.args[2].shape == (mt.N, mt.N)
    sk2 = pickle.loads(pickle.dumps(sk))
    assert sk2 == sk
    k = load(sk2)
    assert isinstance(k, Kernel) and "gemm(A: float32[32, 32]" in repr(k)
    rng = np.random.default_rng(1)
    a, b = (rng.random((mt.N, mt.N), dtype=np.float32) for _ in range(2))
    c1, c2 = np.empty_like(a), np.empty_like(a)
    k(a, b, c1)
    build(*task.instantiate(idx(task, tile_i=[-1, 4], tile_j=[-1, 8])))(a, b, c2)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_allclose(c1, a @ b, rtol=1e-5)
    assert k.time(a, b, c1, number=2, repeat=2).min > 0
    assert "for" in k.get_source("ir") and "define" in k.get_source("llvm")
    assert k.get_source("llvm-unopt") != k.get_source("llvm")
    with pytest.raises(Exception, match=r"argument 2 \(C\): expected shape"):
        k(a, b, np.empty((3, 3), np.float32))


def test_shipped_parallel_kernel():
    from einloop import te, create_schedule
    A = te.placeholder((64, 16), name="A")
    C = te.compute((64, 16), lambda i, j: A[i, j] * 3.0, name="C")
    s = create_schedule(C)
    s[C].parallel(s[C].op.axis[0])
    sk = pickle.loads(pickle.dumps(ship(lower(s, [A, C]), "llvm")))
    k = load(sk)
    a = np.random.default_rng(0).random((64, 16), dtype=np.float32)
    c = np.zeros_like(a)
    k(a, c)
    np.testing.assert_allclose(c, a * 3.0, rtol=1e-6)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A compile cache of its own (build workers started from here inherit it), and no kernel
    compiled in this process yet: a build goes to that cache."""
    monkeypatch.setenv("EINLOOP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jit, "_cache", {})
    return tmp_path / "cache"


def _no_compiling(*args, **kwargs):
    raise AssertionError("the kernel was compiled again")


def test_the_builder_makes_the_object_code_build_makes(task, empty_cache, monkeypatch):
    """A build worker's candidate (its function, run here) and ``build`` of the same schedule
    are the same code: the same optimised IR and byte-identical object code, under one cache
    key.  The builder compiles it without storing it; ``build`` then compiles and stores it."""
    config = idx(task, tile_i=[-1, 4], tile_j=[-1, 8])
    built = B.build_candidate(pickle.dumps(task), config)
    assert built.status is E.NO_ERROR, built.payload
    sk = built.payload
    assert cache.info()[1] == 0                         # the builder stored nothing
    stores = cache.stats.stores
    kernel = build(*task.instantiate(task.candidate(config)))
    assert cache.stats.stores == stores + 1
    entry = cache.load(sk.key)
    assert entry is not None, "build stored its object under another key than the builder's"
    assert entry.obj == sk.entry.obj and entry.symbol == sk.entry.symbol
    assert entry.opt_ir == sk.entry.opt_ir == kernel.get_source("llvm")
    assert entry.target == sk.entry.target and entry.parallel == sk.entry.parallel
    assert sk.unopt_ir == kernel.get_source("llvm-unopt") and sk.name == kernel.name
    rng = np.random.default_rng(2)
    a, b = (rng.random((mt.N, mt.N), dtype=np.float32) for _ in range(2))
    c1, c2 = np.empty_like(a), np.empty_like(a)
    load(sk)(a, b, c1)
    kernel(a, b, c2)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_allclose(c1, a @ b, rtol=1e-5)
    # a later build of it (another job, another process) takes the cache's object, compiling
    # nothing, and the runner loads it as it is
    monkeypatch.setattr(jit, "_compile", _no_compiling)
    again = B.build_candidate(pickle.dumps(task), config)
    assert again.status is E.NO_ERROR and again.payload == sk


def test_the_winner_of_a_tuning_job_is_a_compile_cache_hit_at_build(empty_cache, monkeypatch):
    task = autotune.create_task("tiny_matmul", (16, 32, 8), module="tiny_templates")
    tuner = autotune.RandomTuner(task, seed=3)
    tuner.tune(8, measure_option=autotune.measure_option(number=2, repeat=2, timeout=10),
               quiet=True)
    ok = [r for _, r in tuner.history if r.error_no is E.NO_ERROR]
    assert tuner.best_config is not None and ok
    _, entries, _ = cache.info()
    assert 1 <= entries <= len(ok)                      # improvements only, the winner's last
    s, args = task.instantiate(tuner.best_config)
    monkeypatch.setattr(jit, "_compile", _no_compiling)
    hits, misses = cache.stats.hits, cache.stats.misses
    kernel = build(s, args)
    assert (cache.stats.hits, cache.stats.misses) == (hits + 1, misses)
    rng = np.random.default_rng(3)
    a = rng.random((16, 8), dtype=np.float32)
    b = rng.random((8, 32), dtype=np.float32)
    c = np.empty((16, 32), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_the_runner_seeds_the_cache_with_improvements_only(task, empty_cache):
    """Of the costs 3, 2, 4, 1, 5, 1 only 3, 2 and 1 beat every candidate before them: three
    entries stored, not six (the cache would fill with candidates nobody builds again)."""
    configs = [idx(task, tile_i=[-1, n]) for n in (1, 2, 4, 8, 16)]
    configs.append(idx(task, tile_i=[-1, 2], tile_j=[-1, 4]))
    sks = [ship(lower(*task.instantiate(task.candidate(c)))) for c in configs]
    runner = R.Runner(None, {}, setup_timeout=1.0)       # never started: only its parent side
    stores = cache.stats.stores
    for sk, cost in zip(sks, (3.0, 2.0, 4.0, 1.0, 5.0, 1.0)):
        runner._seed(sk, (cost, cost))
    assert runner.seeded == 3 and cache.stats.stores == stores + 3
    assert {p.name[:-len(".entry")] for p in (empty_cache / f"v{cache.SCHEMA}").iterdir()} \
        == {sks[0].key, sks[1].key, sks[3].key}


def test_a_long_sum_reordered_is_checked_against_the_exact_value_not_the_serial_reference():
    """A float32 sum over 4M elements: the reference adds one after another and drifts by ~1e-3
    of the value; lanes and parallel chunks add in another order, closer to the exact sum.
    They pass; a candidate that drops a chunk of the input still fails."""
    from einloop import te
    A = te.placeholder((64, 256, 256), name="A")
    r0, r1, r2 = (te.reduce_axis((0, n), name=f"r{i}") for i, n in enumerate((64, 256, 256)))
    S = te.compute((1,), lambda _: te.sum(A[r0, r1, r2], axis=[r0, r1, r2]), name="S")
    from einloop.autotune.task.auto import AutoTask
    reference = B.build_candidate(pickle.dumps(AutoTask.of_tensors([A, S], "llvm")),
                                  None).payload
    assert isinstance(reference, R.Reference) and reference.exact is not None
    state = R._State(reference, {"rtol": 1e-4, "atol": 1e-5})
    n = state.out_pos[0]
    exact = state._exact_outputs()[n]
    x = state.arrays[0].astype(np.float64)
    lanes = np.float32(x.reshape(-1, 16).astype(np.float32).sum(0, dtype=np.float32).sum())
    assert R.compare("S", np.array([lanes], np.float32), state.refs[n], 1e-4, 1e-5) is not None
    state.arrays[n][...] = lanes
    assert state._check(n, 1e-4, 1e-5) is None
    state.arrays[n][...] = np.float32(exact[0] * (1 - 1 / 64))      # a chunk of 64 missing
    assert "exact (float64) value" in state._check(n, 1e-4, 1e-5)
