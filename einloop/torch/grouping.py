"""Which ATen nodes of a partition one einloop kernel computes: the backend's grouping.

Three rules over the graph (producers, consumers, shapes; never node names), in order:

1. **epilogues**: an elementwise or layout node joins the group of a node it reads when it is
   that node's only reader (a GEMM's bias and GELU, a convolution's batch norm and ReLU),
   rather a group that computes a product or a reduction than one of index maps;
2. **prologues**: an injective node whose only reader is in another group, and whose own group
   is all injective, joins the reader's group (a transpose read through by a matmul, so no
   layout op ever copies);
3. **attention**: a row normalisation (a softmax along the last dimension) between two products
   -- its input a group ending in a matrix product (``Q @ K^T``, scaled or masked by the
   elementwise nodes of its epilogue) that nothing else reads, its result read by exactly one
   other group, which holds a product (``@ V``) -- is one kernel with both products.  Apart,
   the first kernel writes the scores, the second reads them and writes the weights, the third
   reads those; together the auto-scheduler computes each row's normalisation at the tiles of
   the second product (``DagAnalysis.anchor_of``), and the weights are no kernel's output.

A merge that would make the groups read each other in a cycle is undone (:func:`acyclic`).
"""
from __future__ import annotations

import operator

import torch

from .aten import LOWERINGS

aten = torch.ops.aten

#: matrix products (rule 3): the batched and plain products ``torch.matmul`` decomposes into
PRODUCTS = frozenset({aten.mm.default, aten.bmm.default, aten.matmul.default})
#: row normalisations (rule 3): each node's argument 1 is the dimension it normalises along
ROW_NORMALISATIONS = frozenset({aten._softmax.default, aten._safe_softmax.default,
                                aten._log_softmax.default})


class _Sets:
    """Union-find over nodes: each set is a group, named by its root; ``heavy(x)``: does
    *x*'s group hold a node that is not injective (a product, a reduction)?"""

    def __init__(self, items):
        self.parent = {x: x for x in items}
        self._heavy = {x for x in items if not injective(x)}

    def heavy(self, x) -> bool:
        return self.find(x) in self._heavy

    def snapshot(self):
        return dict(self.parent), set(self._heavy)

    def restore(self, snap):
        self.parent, self._heavy = dict(snap[0]), set(snap[1])

    def find(self, x):
        while self.parent[x] is not x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        self.parent[ra] = rb
        if ra in self._heavy:
            self._heavy.add(rb)


def injective(node) -> bool:
    """Is *node* an index map or elementwise (its lowering's ``injective``)?"""
    return LOWERINGS[node.target].injective


def acyclic(nodes, sets) -> bool:
    """Does the graph of groups (an edge where a node reads another group's node) have no
    cycle?"""
    edges = {}
    for n in nodes:
        g = sets.find(n)
        for a in n.all_input_nodes:
            if a in sets.parent and sets.find(a) is not g:
                edges.setdefault(sets.find(a), set()).add(g)
    state = {}

    def visit(g):
        state[g] = 1
        for h in edges.get(g, ()):
            if state.get(h) == 1 or (h not in state and not visit(h)):
                return False
        state[g] = 2
        return True
    return all(visit(g) for g in list(edges) if g not in state)


def group_nodes(nodes) -> list:
    """The kernels of one partition: lists of its call_function *nodes* (in graph order),
    each a group as the module docstring says."""
    nodes = [n for n in nodes if n.op == "call_function"]
    sets = _Sets(nodes)
    _epilogues(nodes, sets)
    _prologues(nodes, sets)
    _attention(nodes, sets)
    groups = {}
    for n in nodes:
        groups.setdefault(sets.find(n), []).append(n)
    return list(groups.values())


def _epilogues(nodes, sets):
    """Rule 1.  Of the inputs *n* is the only reader of, it joins the group of the first
    whose group computes more than index maps and elementwise math (a masked fill
    ``where(mask, -inf, scores)`` joins the scores' product, not the mask's constant)."""
    inside = set(nodes)
    for n in nodes:
        if not injective(n):
            continue
        owned = [a for a in n.all_input_nodes if a in inside
                 and (len(a.users) == 1 or n.target is operator.getitem)]
        if not owned:
            continue
        heavy = [a for a in owned if sets.heavy(a)]
        sets.union(n, (heavy or owned)[0])


def _prologues(nodes, sets):
    """Rule 2."""
    inside = set(nodes)
    for n in reversed(nodes):
        users = list(n.users)
        if not injective(n) or len(users) != 1 or users[0] not in inside:
            continue
        g = sets.find(n)
        if g is sets.find(users[0]) or not all(injective(m) for m in nodes
                                               if sets.find(m) is g):
            continue
        _union_if_acyclic(nodes, sets, n, users[0])


def _union_if_acyclic(nodes, sets, *members) -> bool:
    """Merge the groups of *members* unless that makes a cycle of groups; whether it did."""
    before = sets.snapshot()
    for m in members[1:]:
        sets.union(m, members[0])
    if acyclic(nodes, sets):
        return True
    sets.restore(before)
    return False


def _attention(nodes, sets):
    """Rule 3: each row normalisation with a product's group before it and one product's
    group after it (:func:`attention_groups`) is merged with them."""
    for n in nodes:
        found = attention_groups(n, nodes, sets)
        if found is not None:
            _union_if_acyclic(nodes, sets, *found)


def attention_groups(n, nodes, sets):
    """``(a node of the scores' group, *n*, a node of the output's group)`` where node *n*
    is a row normalisation that rule 3 applies to, else None."""
    if n.target not in ROW_NORMALISATIONS or not _along_last(n):
        return None
    rows = _members(nodes, sets, n)
    if [m for m in rows if not injective(m)] != [n]:
        return None                     # another reduction in the group: not a plain softmax
    src = n.args[0]
    if src not in sets.parent or sets.find(src) is sets.find(n):
        return None
    scores = _members(nodes, sets, src)
    if not _one_product(scores) or _readers(scores, sets) != {sets.find(n)}:
        return None                     # the scores are read elsewhere (an output, a sum)
    readers = _readers(rows, sets)
    if len(readers) != 1:
        return None                     # the weights are an output, or read by two groups
    (out,) = readers
    if out is None or out is sets.find(src) or not _one_product(_members(nodes, sets, out)):
        return None
    return src, n, out


def _along_last(n) -> bool:
    """Does row normalisation *n* normalise along its input's last dimension?"""
    rank = n.args[0].meta["val"].dim()
    return rank >= 2 and n.args[1] % rank == rank - 1


def _members(nodes, sets, n) -> list:
    g = sets.find(n)
    return [m for m in nodes if sets.find(m) is g]


def _one_product(members) -> bool:
    """Is a matrix product the group's one node that is not injective?"""
    heavy = [m for m in members if not injective(m)]
    return len(heavy) == 1 and heavy[0].target in PRODUCTS


def _readers(members, sets) -> set:
    """The groups other than the one of *members* that read its nodes (an output of the
    graph, or a node outside the partition, counts as a reader of its own: ``None``)."""
    g = sets.find(members[0])
    out = set()
    for m in members:
        for u in m.users:
            h = sets.find(u) if u in sets.parent else None
            if h is not g:
                out.add(h)
    return out
