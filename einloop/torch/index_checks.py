"""Indices read from data checked as PyTorch checks them, before einloop's kernels use them.

An embedding's ids and ``index_add``'s indices select rows at run time, so no declaration can
prove them in range, and einloop's kernels clamp such reads into range (a kernel never reads or
writes out of bounds).  PyTorch raises an IndexError instead, and a model compiled by the
backend must not turn that error into a silently wrong result.  So :func:`guard_indices` gives
every such operator of a graph a check of its index tensor, run in PyTorch as a node of the
graph (``aminmax``, one pass over the indices): out of range, the call raises
:class:`~einloop.errors.IndexRangeError` naming the operator, the index and the size.
"""
from __future__ import annotations

import torch
import torch.fx

from ..errors import IndexRangeError

aten = torch.ops.aten

#: ATen operator -> (position of its index argument, of the tensor indexed, of the dimension
#: indexed (always given, positionally) or None for 0): the operators einloop lowers that read
#: indices from data (an embedding's backward reads the forward's ids, already checked there)
INDEXING = {
    aten.embedding.default: (1, 0, None),
    aten.index_add.default: (2, 0, 1),
}


@torch.fx.node.has_side_effect
def check_indices(index, indexed, dim, what):
    """Raise IndexRangeError if an element of *index* is outside ``[0, indexed.shape[dim])``."""
    if index.numel() == 0:
        return
    size = indexed.shape[dim]
    low, high = torch.aminmax(index)
    low, high = int(low), int(high)
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise IndexRangeError(f"{what}: index {bad} is out of range for dimension {dim} of "
                              f"size {size} (einloop checks it as PyTorch does: its kernels "
                              "would clamp it)")


def guard_indices(graph: torch.fx.Graph) -> int:
    """Insert a :func:`check_indices` node before every operator of *graph* in
    :data:`INDEXING`; returns how many."""
    added = 0
    for node in list(graph.nodes):
        spec = INDEXING.get(node.target) if node.op == "call_function" else None
        if spec is None:
            continue
        at_index, at_indexed, at_dim = spec
        dim = 0 if at_dim is None else node.args[at_dim]
        index, indexed = node.args[at_index], node.args[at_indexed]
        if not isinstance(index, torch.fx.Node) or not isinstance(indexed, torch.fx.Node):
            continue
        with graph.inserting_before(node):
            graph.call_function(check_indices, (index, indexed, dim, str(node.target)))
        added += 1
    return added


__all__ = ["INDEXING", "check_indices", "guard_indices"]
