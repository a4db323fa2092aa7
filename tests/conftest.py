import atexit
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The suite's builds fill a compile cache of this session's own, never the user's
# (subprocesses inherit it; concurrent pytest processes each get their own directory).
_COMPILE_CACHE = tempfile.mkdtemp(prefix="einloop-test-cache-")
os.environ["EINLOOP_CACHE_DIR"] = _COMPILE_CACHE
atexit.register(shutil.rmtree, _COMPILE_CACHE, True)

# torch.compile's caches too: Inductor keys a compiled graph by its code, not by the schemas of
# the custom ops it calls, so a graph cached by an older checkout (same test op names, another
# schema) would be replayed against today's ops.
_INDUCTOR_CACHE = os.path.join(_COMPILE_CACHE, "torchinductor")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE

# A rule of the auto-scheduler that raises is a bug to see, not a space to relax quietly
# (einloop.autotune.space.sketch.generate): raise it, here and in every worker process.
os.environ["EINLOOP_STRICT_RULES"] = "1"


# Modules (or single tests, "module::test") that must have the machine to themselves: `make test`
# runs the rest in two processes side by side (pytest-xdist; the suite fits CI's time on 2
# cores), then these alone, since they time threads, move them between CPUs or wait on timeouts
# of a few seconds, which a second test process beside them would make flaky.  (Tests that
# only count their own process's threads or read its CPU mask run in parallel.)
ALONE = {
    "codegen/test_team.py": "moves threads between CPUs and holds them back on purpose",
    "codegen/test_blas_bridge.py": "OpenBLAS's spinning workers and the cores they take",
    "runtime/test_timing.py": "times pauses and warm-up calls by the clock",
    "autotune/test_measure.py": "timeouts of a few seconds, SIGINT to its own process",
    "autotune/test_overlap.py": "reads workers' states while builds are stopped, SIGINT",
    "autotune/test_process_hygiene.py": "kills jobs and looks for the processes they leave",
    "autotune/test_cluster.py": "a Dask LocalCluster and its timeouts",
    "fuzz/test_fuzz_ci.py::test_pool_reports_a_crash_and_a_hang_and_goes_on":
        "worker timeouts of one second",
}
_TESTS = os.path.dirname(os.path.abspath(__file__))
#: the modules of `make test`'s parallel part that take the longest, longest first, with their
#: seconds (`pytest -n 2 --dist loadfile -m "not alone"`, each test's wall time summed per module,
#: on a 2-core VM that other jobs loaded to a load average of about 7: the order is what counts).
#: `--dist loadfile` hands modules out in collection order, so these are collected first, in
#: this order, and the two processes end on short modules instead of one of them finishing a long
#: module alone (pytest_configure turns off xdist's own reordering).
HEAVY_FIRST = (
    ("torch/test_torch_dynamic.py", 95),
    ("torch/test_torch_gradients.py", 82),
    ("test_readme.py", 72),
    ("test_demo.py", 70),
    ("autotune/test_tuning.py", 68),
    ("torch/test_symbolic_backend.py", 63),
    ("autotune/test_dynamic_tuning.py", 63),
    ("fuzz/test_fuzz_ci.py", 60),
    ("autotune/test_cross_sizes.py", 60),
    ("codegen/test_parallel_runtime.py", 49),
    ("autotune/auto/test_rule_tensorize.py", 45),
    ("torch/test_model_tune.py", 43),
    ("torch/test_torch_threads.py", 41),
    ("autotune/auto/test_rule_residues.py", 41),
    ("torch/test_backend.py", 40),
    ("autotune/auto/test_rule_rows.py", 36),
    ("autotune/test_tuning_anywhere.py", 34),
    ("test_dynamic_shapes.py", 34),
    ("torch/test_attention_grouping.py", 32),
    ("te/test_gradient.py", 31),
    ("autotune/test_auto_api.py", 28),
    ("autotune/test_database.py", 27),
    ("autotune/auto/test_rule_prefetch.py", 26),
    ("autotune/test_repeated_schedules.py", 26),
    ("autotune/auto/test_rule_nontemporal.py", 25),
    ("regressions/test_codegen_safety.py", 25),
    ("lowprec/test_bf16_kernels.py", 23),
    ("autotune/test_measure_session.py", 23),
    ("test_cli.py", 21),
    ("torch/test_torch_custom_op.py", 21),
)
_HEAVY_RANK = {module: rank for rank, (module, _) in enumerate(HEAVY_FIRST)}


def pytest_collection_modifyitems(config, items):
    """Mark the tests ALONE names ``alone`` (``-m alone`` / ``-m "not alone"``); a single test
    it names that its collected module does not have (renamed) is an error."""
    modules, marked = set(), set()
    for item in items:
        rel = os.path.relpath(str(item.path), _TESTS).replace(os.sep, "/")
        modules.add(rel)
        for name in (rel, f"{rel}::{item.originalname}"):
            if name in ALONE:
                item.add_marker(pytest.mark.alone)
                marked.add(name)
    lost = [n for n in ALONE if "::" in n and n.split("::")[0] in modules and n not in marked]
    if lost:
        raise pytest.UsageError(f"tests/conftest.py ALONE names tests that do not exist: {lost}; "
                                f"update it where a test was renamed")

    def heavy(item):
        rel = os.path.relpath(str(item.path), _TESTS).replace(os.sep, "/")
        return _HEAVY_RANK.get(rel, len(HEAVY_FIRST))
    items.sort(key=heavy)                       # stable: each module's tests keep their order


def pytest_configure(config):
    """Ctrl-C tests send SIGINT to this process; a shell that starts the suite in the background
    (``make test &``) hands it SIGINT ignored, and Python then never raises KeyboardInterrupt.
    Restore Python's own handler so those tests test einloop, not how the suite was started."""
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # pytest-xdist >= 3.6 sorts --dist loadfile's modules by their number of tests unless told
    # not to: a long module of few tests (a tuning job) then starts last, and one process ends it
    # alone while the other idles.  Keep the collection order, longest first (HEAVY_FIRST).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.addinivalue_line("markers", "alone: runs after the parallel part of `make test`, "
                                       "with no other test process beside it (tests/conftest.py)")
    missing = [m for m in ALONE if not os.path.exists(os.path.join(_TESTS, m.split("::")[0]))]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py ALONE names modules that do not exist: "
                                f"{missing}; update it where a module was renamed")
    _require_torch_in_ci()


def _require_torch_in_ci():
    """In CI the PyTorch tests must run: the test extra installs torch, so its absence there is
    a broken install, not a reason to skip them."""
    import importlib.util
    if os.environ.get("CI") and importlib.util.find_spec("torch") is None:
        raise pytest.UsageError("CI is set but torch is not installed: install the test extra "
                                "(pip install -e '.[test]', which pins torch==2.13.0)")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Builds in this process go to an empty compile cache in tmp_path, with zeroed stats
    (the compile cache's tests and the dtypes' cache-key tests)."""
    from einloop.codegen import cache, jit
    monkeypatch.setenv("EINLOOP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EINLOOP_CACHE", raising=False)
    monkeypatch.setattr(jit, "_cache", {})
    monkeypatch.setattr(cache, "stats", cache.CacheStats())
    return tmp_path
