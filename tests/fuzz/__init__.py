"""einloop's in-house differential fuzzer: random operators x random schedules vs NumPy.

Run it::

    make fuzz N=10000 SEED=1                    # or: python -m tests.fuzz -n 10000 --seed 1 -j 2
    python -m tests.fuzz --case 1000087         # one case: print it, run it, shrink it if it fails
    python -m tests.fuzz --replay fuzz_out/wrong-1000087.json

A run prints the counts per outcome (ok, rejected, wrong, crash, hang, exception, internal, and
harness for a fault of the fuzzer itself), the time taken, the rejected declarations and schedules
grouped by message (a wrong rejection is a bug too), and the failures grouped by signature; then
it shrinks one case per failure signature into a standalone reproducer under ``fuzz_out/``.
``test_fuzz_ci.py`` runs a fixed-seed slice in CI and allows no failure.

The parts, in the order a case flows through them:

- ``gen_ops`` (with ``gen_index`` for reads, ``values`` for dtypes and ranges): a random
  operator DAG as plain data (JSON): placeholders, computes and einsums over every dtype,
  intrinsic, reducer (built-in and ``comm_reducer``), ``where=``, casts, ``if_then_else``,
  ``te.all``/``te.any`` and index form (affine, strided, reversed, constant, ``//`` and ``%``,
  clamps, narrowing casts, gathers, padding guards in either branch, dead branches);
  ``gen_lang`` adds the newer constructs (``te.argmax``/``argmin`` on tied data with NaN,
  user-declared tuple reducers, ``te.welford``, multi-output computes, ``te.cumsum``/``cumprod``,
  user-written ``te.scan``s of one or two states, ``te.scatter_add``/``histogram`` with out-of-range indices, ``te.extern`` calls of
  ``extern_fuzz``'s C functions), ``--lang-rate`` says how often.
- ``gen_schedules``: a random legal schedule for it as a list of steps (cache_read/write, split,
  tile, fuse, reorder, compute_at/inline/root, vectorize, parallel, unroll) plus a few wild
  steps einloop may reject; ``sched_lang`` the newer constructs' rules (tuple rfactor, scatter
  privatization, the scan axis kept serial) and *illegal* steps einloop must refuse with a
  ScheduleError; ``cases.make_case(seed)`` puts both together.
- ``program`` (with ``program_lang``): the case as einloop source code, which the worker
  executes and reproducers embed.
- ``reference`` (with ``reference_lang``): an independent NumPy interpreter of the declarations
  with a per-element rounding-error bound (never einloop's lowering, which the default schedule
  shares).
- ``harness``: runs one case on guarded arrays (next to PROT_NONE pages), outputs pre-filled
  with a sentinel, 1 and 2 threads, the default and the generated schedule, and classifies.
- ``pool`` and ``worker``: persistent worker processes with per-phase time-outs (compile, run),
  crash detection and restart; ``campaign`` runs many cases through them and reports.
- ``shrink`` and ``repro``: reduce a failing case while its signature holds, and write it as a
  short standalone .py with the expected values embedded.
"""
