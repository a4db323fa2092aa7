# Quick start:  make demo   (run the main job)      make test   (run the test suite)
# Each target creates .venv and installs einloop with what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test bench bench-tune bench-robust bench-auto bench-interplay bench-torch bench-torch-threads bench-models-ops clean

# pip byte-compiles what it installs one file at a time (torch's 10,000 files: ~28 s of CPU);
# compileall -j 0 does the same on every core.  The bytecode matters: test processes that import
# torch would otherwise compile its sources each time where PYTHONDONTWRITEBYTECODE is set.  (A
# few files of torch's own tests are Python 3.12 syntax: compileall reports them, as pip skips
# them, and the install goes on.)
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -e '.[test,bench]'
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true
	touch $@

demo: $(VENV)/.installed
	$(PY) -m einloop demo

# Two test processes side by side (pytest-xdist, a module per process at a time), then the tests
# that need the machine to themselves (ALONE in tests/conftest.py).  einloop and the tests are
# byte-compiled first: hundreds of tests start fresh interpreters (tuning's build and run workers,
# the CLI, README snippets) that import einloop, and where PYTHONDONTWRITEBYTECODE is set (as on
# CI) each of them would compile einloop's sources again (about 0.2 s of CPU a process).
test: $(VENV)/.installed
	$(PY) -m compileall -q -j 0 einloop tests >/dev/null
	$(PY) -m pytest -n 2 --dist loadfile -m "not alone"
	$(PY) -m pytest -m alone $$($(ALONE_MODULES))

# The modules of the tests that run alone (ALONE in tests/conftest.py): the alone part collects
# only these instead of every test module (torch's included) to pick 81 tests out of 3,400.
# Should this fail to print them, pytest collects everything and runs the same tests.
ALONE_MODULES = $(PY) -c 'import sys; sys.path.insert(0, "tests"); from conftest import ALONE; \
                          print(*sorted({"tests/" + m.split("::")[0] for m in ALONE}))'

# Benchmarks compare against NumPy/OpenBLAS; run them with OpenBLAS's own kernel choice.
bench: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_core.py

bench-tune: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_tune.py

bench-robust: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_robust.py

# Tuned kernels next to NumPy, PyTorch and a busy core; fresh-process calls vs the logged time
bench-interplay: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_interplay.py

# einloop custom ops in PyTorch (forward, forward + backward) against eager and torch.compile
bench-torch: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_torch.py $(ARGS)

# the auto-scheduler on models' operators (SwiGLU, attention, transposed conv, full sum, GEMV)
bench-models-ops: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_models_ops.py $(ARGS)

# an einloop kernel and custom op alone and between PyTorch ops, in both import orders
bench-torch-threads: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_torch_threads.py

# Auto-scheduling (no template): e.g. make bench-auto ARGS="--trials 16 --budget 60 --ops gemm"
ARGS ?=
bench-auto: $(VENV)/.installed
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) benchmarks/bench_auto.py $(ARGS)

# Differential fuzzing: random operators x schedules vs NumPy; reproducers go to fuzz_out/.
N    ?= 1000
SEED ?= 1
JOBS ?= 2
.PHONY: fuzz
fuzz: $(VENV)/.installed
	$(PY) -m tests.fuzz -n $(N) --seed $(SEED) -j $(JOBS)

clean:
	rm -rf $(VENV) build *.egg-info
