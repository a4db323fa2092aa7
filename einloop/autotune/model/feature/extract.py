"""Fixed-length feature vectors of a lowered loop nest, for the auto-tuner's cost model.

``extract(func)`` turns a :class:`~einloop.ir.stmt.LoweredFunc` into a float32 vector of
exactly :data:`FEATURE_LENGTH` values, whatever the loop nest; ``feature_names()`` names them.
The layout is meant to carry over between shapes and operators: nothing in it depends on buffer
or loop names, and the number of slots is fixed (missing slots are zero, extra ones are dropped).

How the vector is built
-----------------------
1. One walk over the IR collects every ``Store`` with its chain of enclosing loops (loops of
   extent 1 are left out), the number of ``if`` around it, and the loads, float operations,
   intrinsic calls and ``select``s of its value.
2. Stores are grouped into *replica groups*: same buffer, same shape of value expression
   (constants and index expressions ignored), same shape of loop chain.  The unroll pass of
   ``lower()`` replicates the body of an unrolled loop; a replica group recovers it as one
   *virtual* unrolled loop whose extent is the number of replicas, placed where the replicas'
   loop chains part (just outside a vector loop, in the usual micro-kernel).  In IR lowered
   without expanding unrolls, the ``unrolled`` loops around a store become that same virtual
   loop, and statement counts are those of the expanded IR, so both IRs give the same row
   (exactly for tiles that divide their loops; tested on the GEMM and conv2d examples; where the
   expansion lets the simplifier drop guards the rows differ, as the code does).
3. Every access (the store and each load) gets an approximate affine form of its flat index in
   the loop variables (``//``, ``%``, ``min``, ``select`` are approximated and flagged not exact).
   From it: the stride per loop, and the distinct elements touched by the innermost w loops
   (product of per-loop distinct counts, capped by the index span; replicas are a union over
   their constant offsets), bytes, cache lines (64 B) and reuse (iterations / distinct elements).
4. The most expensive group (trip count x (1 + flops + loads + 8 x intrinsic calls)) is described
   in detail in block ``m_``: scalars, then ``N_LOOPS_MAIN`` loop slots (innermost first) and
   ``N_ACCESSES_MAIN`` access slots (the store first, then loads by bytes touched); the most
   expensive group storing to another buffer gets a smaller block ``s_``; whole-kernel scalars
   come first (``g_``).

Every value passes through ``sign(x) * log2(1 + |x|)``.  Anything unexpected in the function (a
malformed IR, a non-positive extent) gives a zero row with ``g_extract_failed`` = 1.  The one
thing ``extract`` raises is a :class:`~.feature_layout.FeatureNameError` (an InternalError):
the extractor wrote a name the layout does not have, a bug that a failed row would hide.

The scan is split by job: see :mod:`.feature_scan`.
"""
from __future__ import annotations

import warnings

import numpy as np

from ....ir.stmt import LoweredFunc
from ....schedule.lower import lower
from ....schedule.passes.split_prologue import split_prologue
from ....te.tensor import constant_positions

__all__ = ["FEATURE_LENGTH", "SCHEMA_HASH", "extract", "extract_many", "extract_schedule",
           "feature_names", "schema", "failed_row", "raw_features", "as_dict"]

from .layout import (FEATURE_LENGTH, SCHEMA_HASH, feature_names, schema, NAMES, INDEX, FAILED_SLOT,
                     FeatureNameError)
from .scan import scan


def failed_row() -> np.ndarray:
    row = np.zeros(FEATURE_LENGTH, np.float32)
    row[FAILED_SLOT] = 1.0
    return row


def extract(func) -> np.ndarray:
    """The feature vector of lowered function *func*: float32, length ``FEATURE_LENGTH``.

    On anything unexpected in *func* it returns a zero row with ``g_extract_failed`` = 1; a
    feature name the layout does not have raises :class:`FeatureNameError`.
    """
    try:
        if not isinstance(func, LoweredFunc):
            return failed_row()
        vals = scan(func)
        row = np.zeros(FEATURE_LENGTH, np.float64)
        for name, v in vals.items():
            row[INDEX[name]] = v
        row = np.sign(row) * np.log2(1.0 + np.abs(row))
        if not np.all(np.isfinite(row)):
            return failed_row()
        return row.astype(np.float32)
    except FeatureNameError:
        raise
    except Exception:          # noqa: BLE001 -- by contract (RecursionError included)
        return failed_row()


def raw_features(func) -> dict:
    """The non-zero features of *func* by name, before the log scaling (for debugging and
    reports); raises on a malformed function instead of flagging it."""
    if not isinstance(func, LoweredFunc):
        raise TypeError(f"expected a LoweredFunc, got {type(func).__name__}")
    return {n: v for n, v in scan(func).items() if v}


def as_dict(row) -> dict:
    """Name the values of a feature row (after scaling): ``{name: value}`` of the non-zeros."""
    row = np.asarray(row).reshape(-1)
    if row.shape[0] != FEATURE_LENGTH:
        raise ValueError(f"a feature row has {FEATURE_LENGTH} values, got {row.shape[0]}")
    return {n: float(v) for n, v in zip(NAMES, row) if v}


def extract_many(funcs) -> np.ndarray:
    """Stack ``extract`` over *funcs*: shape ``(len(funcs), FEATURE_LENGTH)``; ``None`` entries
    (candidates that failed to lower) give flagged rows."""
    funcs = list(funcs)
    out = np.zeros((len(funcs), FEATURE_LENGTH), np.float32)
    for n, f in enumerate(funcs):
        out[n] = extract(f)
    return out


def extract_schedule(s, args) -> np.ndarray:
    """Lower schedule *s* with *args* and extract; a schedule that fails to lower gives a
    flagged row.  Work on constant inputs alone is left out, as it is of the measured call
    (:func:`~einloop.schedule.passes.split_prologue.split_prologue`)."""
    try:
        with warnings.catch_warnings():     # a generated schedule's warnings are not the user's
            warnings.simplefilter("ignore")
            func = lower(s, args, expand_unroll=False)     # same loop structure, unroll not expanded
    except Exception:          # noqa: BLE001
        return failed_row()
    split = split_prologue(func, constant_positions(args))
    return extract(func if split is None else split.main)

