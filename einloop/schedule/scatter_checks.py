"""The checks schedule primitives make on scatter stages (:mod:`einloop.te.scatter`).

A scatter stage is stored whole at the root: compute_at of it, cache_write, storage_order and
split_residues do not apply, nor do the primitives that rewrite a reader's reads (cache_read,
pack, deinterleave) when the reader is a scatter.  Its domain loops may not be parallel or
vectorized before they are privatized (:mod:`.scatter`).  Kept apart from :mod:`.scatter`,
which needs bound inference, so that :mod:`.stage` can import these.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..te.scatter import is_scatter
from ..te.tensor import IterKind


def refuse(stage, primitive, why):
    """A ScheduleError if *stage* is a scatter: *primitive* does not apply to one, *why*."""
    if is_scatter(stage.op):
        raise ScheduleError(f"{primitive} on stage {stage.name}: {stage.name} is a scatter, "
                            f"{why}")


def refuse_reader(readers, primitive):
    """A ScheduleError if one of *readers* is a scatter stage (its reads cannot be rewritten)."""
    for r in readers:
        refuse(r, primitive, "whose reads this primitive cannot redirect; read the tensor "
                             "directly (or through a stage of your own)")


def parallel_domain_error(stage, iv, primitive) -> ScheduleError:
    """The error for *primitive* (parallel, vectorize) on domain loop *iv* of a scatter."""
    return ScheduleError(
        f"{primitive} on stage {stage.name}: {iv.name} is a loop of the scatter's domain; two "
        f"of its iterations may update the same element of {stage.name}, so they cannot run at "
        f"once. {primitive} a free axis ({leaf_names(stage, IterKind.DATA) or 'it has none'}), or "
        f"privatize the domain: ro, ri = s[{stage.name}].split({iv.name}, nparts=P); "
        f"s.rfactor({stage.name}, ro) gives each ro its own copy of the output, and ro of "
        f"{stage.name}.rf may be parallel")


def leaf_names(stage, kind):
    return ", ".join(iv.name for iv in stage.leaf_iter_vars if iv.kind is kind)
