"""Views cost nothing at a kernel's boundary: reshapes are moved out of kernels.

ATen graphs reshape around every linear layer (``addmm`` works on 2-d rows: a 3-d activation
is viewed as rows before it and back after it), so the epilogue of a product -- bias, ReLU, a
residual add -- reads the product through a reshape.  In a kernel's te DAG that reshape is an
index map between the product and its epilogue, whose shapes then differ: the auto-scheduler
cannot compute the product inside the epilogue's tiles (``DagAnalysis._fusion`` needs the same
shape, read point for point), so the product was tiled alone, written, and read again by a
root stage that also copied it into the new shape.

Two rewrites remove such reshapes:

* :func:`sink_views` (on the partition's graph, before grouping): an elementwise node that reads
  a reshape of a tensor computes in that tensor's shape instead, and its result is reshaped:
  ``relu(view(P, s)) -> view(relu(P), s)``, ``add(view(P, s), R) -> view(add(P, reshape(R,
  P.shape)), s)`` (an operand of shape ``s`` is reshaped with it, one that broadcasts along the
  trailing dimensions ``s`` and ``P.shape`` share is read as it is, anything else stops the
  rewrite); two reshapes in a row become one.  The reshapes move towards the kernel's end.
* :func:`trailing_views` (on the groups): a reshape that is the last node of its group, of a
  node of the group, leaves the group and runs as :class:`ViewStep`, a torch view of the
  kernel's (contiguous) output: no copy.
* :func:`leading_views` (on the groups): a reshape that is the first node of its group, of a
  tensor the group reads from outside (a partition's input, another kernel's output), leaves
  the group the same way, so the kernel's placeholder is the reshaped tensor: a linear layer
  on ``(S, B, E)`` activations reads its ``(S * B, E)`` rows as they lie (an operand the
  auto-scheduler may pack), not through a reshape stage that it would copy or index through.
"""
from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten

#: reshapes: same elements, same row-major order, another shape
VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})
#: elementwise operators whose tensor operands broadcast to the result: computed in any shape
ELEMENTWISE = frozenset({
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Scalar,
    aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar,
    aten.maximum.default, aten.minimum.default, aten.pow.Tensor_Scalar,
    aten.relu.default, aten.gelu.default, aten.silu.default, aten.sigmoid.default,
    aten.tanh.default, aten.exp.default, aten.neg.default, aten.abs.default,
    aten.erf.default, aten.sqrt.default, aten.rsqrt.default, aten.log.default,
    aten.clone.default, aten._to_copy.default, aten.alias.default, aten.detach.default})


def _shape(node) -> tuple:
    return tuple(node.meta["val"].shape)


def sink_views(graph: torch.fx.Graph) -> None:
    """Rewrite *graph* (in place) as the module docstring says."""
    gone = set()                    # nodes erased on the way (still in the list walked)
    for n in list(graph.nodes):
        if n.op != "call_function" or n in gone or "val" not in n.meta:
            continue
        if n.target in VIEWS:
            gone |= _merge_views(graph, n)
        elif n.target in ELEMENTWISE:
            gone |= _sink_through(graph, n)


def _is_view(a) -> bool:
    return isinstance(a, torch.fx.Node) and a.op == "call_function" and a.target in VIEWS \
        and "val" in a.meta


def _merge_views(graph, n) -> set:
    """``view(view(P, a), b) -> view(P, b)`` where the inner view has no other reader, and
    ``view(P, P.shape) -> P``; returns the nodes erased."""
    inner = n.args[0]
    if not _is_view(inner) or len(inner.users) != 1:
        return set()
    src = inner.args[0]
    if isinstance(src, torch.fx.Node) and "val" in src.meta and _shape(src) == _shape(n):
        n.replace_all_uses_with(src)
        graph.erase_node(n)
        graph.erase_node(inner)
        return {n, inner}
    n.args = (src,) + tuple(n.args[1:])
    graph.erase_node(inner)
    return {inner}


def _sink_through(graph, n) -> set:
    """``op(view(P, s), ...) -> view(op(P, ...), s)`` where that is legal (module docstring);
    returns the nodes erased."""
    views = [a for a in n.all_input_nodes if _is_view(a) and len(a.users) == 1]
    if len(views) != 1 or not all("val" in a.meta for a in n.all_input_nodes):
        return set()
    (v,) = views
    src, shape = v.args[0], _shape(v)
    if not isinstance(src, torch.fx.Node) or "val" not in src.meta or _shape(n) != shape \
            or _shape(src) == shape:
        return set()
    inner = _shared_trailing(shape, _shape(src))
    plan = {}
    for a in n.all_input_nodes:
        if a is v:
            plan[a] = src
        elif _shape(a) == shape:
            plan[a] = None                               # reshaped with the product
        elif len(_shape(a)) > inner:
            return set()                                 # broadcasts across merged axes
    with graph.inserting_before(n):
        for a, to in list(plan.items()):
            if to is None:
                plan[a] = graph.call_function(aten.reshape.default, (a, list(_shape(src))))
                plan[a].meta["val"] = a.meta["val"].reshape(_shape(src))
        args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: plan.get(a, a))
        computed = graph.call_function(n.target, args, kwargs)
        computed.meta["val"] = n.meta["val"].reshape(_shape(src))
        viewed = graph.call_function(aten.view.default, (computed, list(shape)))
        viewed.meta["val"] = n.meta["val"]
    n.replace_all_uses_with(viewed)
    graph.erase_node(n)
    graph.erase_node(v)
    return {n, v}


def _shared_trailing(a, b) -> int:
    """How many trailing dimensions shapes *a* and *b* have in common (same sizes)."""
    k = 0
    while k < min(len(a), len(b)) and a[-1 - k] == b[-1 - k]:
        k += 1
    return k


def trailing_views(groups) -> list:
    """*groups* with every reshape that ends its group (it reads a node of its group, and no
    node of the group reads it) taken out into a group of its own, which
    :func:`is_view_group` tells apart and :class:`ViewStep` runs."""
    out = []
    for g in groups:
        g = list(g)
        peeled = []
        changed = True
        while changed and len(g) > 1:
            changed = False
            members = set(g)
            for n in reversed(g):
                if n.target in VIEWS and n.args[0] in members \
                        and not any(u in members for u in n.users):
                    g.remove(n)
                    peeled.append([n])
                    changed = True
                    break
        out.append(g)
        out.extend(reversed(peeled))
    return out


def leading_views(groups) -> list:
    """*groups* with every reshape of a tensor from outside its group (that the group then
    reads) taken out into a group of its own, ahead of its group; a group that is that
    reshape alone stays as it is."""
    out = []
    for g in groups:
        members = set(g)
        peeled = [n for n in g if n.target in VIEWS and isinstance(n.args[0], torch.fx.Node)
                  and n.args[0] not in members] if len(g) > 1 else []
        if len(peeled) == len(g):
            peeled = peeled[1:]           # a group of reshapes alone: one stays the kernel
        out.extend([n] for n in peeled)
        out.append([n for n in g if n not in peeled])
    return out


def is_view_group(group) -> bool:
    """Is *group* a lone reshape of another group's node (:func:`trailing_views`)?"""
    return len(group) == 1 and group[0].target in VIEWS


class ViewStep:
    """A reshape run as a torch view of its input's tensor (a kernel's output, contiguous):
    ``run(env)`` stores it in *env* as a kernel stores its outputs."""

    def __init__(self, node):
        self.node, self.src, self.shape = node, node.args[0], _shape(node)
        self.name = node.name

    def run(self, env):
        env[self.node] = env[self.src].reshape(self.shape)
