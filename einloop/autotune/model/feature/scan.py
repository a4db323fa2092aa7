"""The scan behind :mod:`einloop.autotune.model.feature.extract`: walk the loop IR once, group the stores into
replica groups, describe their accesses, and write the named values of the layout.

Each job has its module: :mod:`.feature_walk` (stores, loop chains, statement counts),
:mod:`.feature_affine` (approximate index forms), :mod:`.feature_groups` (replica groups and
their accesses), :mod:`.feature_footprint` (bytes, lines and reuse per window of loops),
:mod:`.feature_block` and :mod:`.feature_kernel` (the ``m_``/``s_`` blocks and the ``g_``
values).
"""
from __future__ import annotations

from ....ir.expr import Buffer
from .affine import ApproxAffine
from .groups import describe, replica_groups
from .kernel import write_kernel
from .layout import FeatureValues
from .walk import NestScan


def scan(func) -> FeatureValues:
    """The named feature values of lowered function *func*, before scaling (absent names are
    zero).  Raises on a malformed function; writing a name the layout does not have is a
    :class:`~einloop.autotune.model.feature.layout.FeatureNameError`."""
    for b in tuple(func.args) + tuple(func.temps):
        if not isinstance(b, Buffer):
            raise TypeError(f"{b!r} is not a Buffer")
    nest = NestScan()
    nest.visit(func.body)
    affine = ApproxAffine(nest.lets)
    groups = [describe(reps, affine) for reps in replica_groups(nest.stores)]
    vals = FeatureValues()
    write_kernel(vals, func, nest, groups)
    return vals
