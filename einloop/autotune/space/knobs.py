"""Search spaces: knobs a template defines, and configurations (one entity per knob).

A :class:`ConfigSpace` is the product of its knobs.  Every configuration has a stable integer
index (mixed radix over the knobs, in definition order), so a config can be logged as a number
plus readable entities, and a tuner can treat the space as integer vectors.
"""
from __future__ import annotations

from dataclasses import dataclass
import itertools
import math
import types

from ...errors import TuningError
from ...te.tensor import IterVar
from .candidate import Candidate, CandidateKind

ANNOTATIONS = ("none", "unroll", "vec", "parallel")


# entities ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SplitEntity:
    """Factors of a split, outermost first; the outermost is ``-1`` (whatever remains)."""
    size: tuple

    def apply(self, s, tensor, axis):
        """Split *axis* of stage ``s[tensor]`` into ``len(size)`` loops; returns them, outer
        first."""
        stage = s[tensor] if not hasattr(tensor, "leaf_iter_vars") else tensor
        loops = []
        rest = axis
        inner = self.size[1:]
        for n in range(len(inner)):
            factor = math.prod(inner[n:])
            outer, rest = stage.split(rest, factor=factor)
            loops.append(outer)
        loops.append(rest)
        return loops

    def to_json(self):
        return list(self.size)


@dataclass(frozen=True)
class ReorderEntity:
    perm: tuple

    def apply(self, s, tensor, axes):
        stage = s[tensor] if not hasattr(tensor, "leaf_iter_vars") else tensor
        stage.reorder(*[axes[i] for i in self.perm])
        return [axes[i] for i in self.perm]

    def to_json(self):
        return list(self.perm)


@dataclass(frozen=True)
class AnnotateEntity:
    anns: tuple

    def apply(self, s, tensor, axes):
        stage = s[tensor] if not hasattr(tensor, "leaf_iter_vars") else tensor
        for ax, ann in zip(axes, self.anns):
            if ann == "unroll":
                stage.unroll(ax)
            elif ann == "vec":
                stage.vectorize(ax)
            elif ann == "parallel":
                stage.parallel(ax)

    def to_json(self):
        return list(self.anns)


@dataclass(frozen=True)
class OtherEntity:
    val: object

    def to_json(self):
        return self.val


# knobs ------------------------------------------------------------------------------------------

class Knob:
    """A named dimension of the space with a list of entities."""
    kind = "knob"

    def __init__(self, name, entities, default_index=0):
        if not entities:
            raise TuningError(f"knob {name!r} has no candidates (check its filter and max_factor)")
        self.name = name
        self.entities = list(entities)
        self.default_index = default_index

    def __len__(self):
        return len(self.entities)

    def index_of(self, entity_json):
        for n, e in enumerate(self.entities):
            if e.to_json() == entity_json:
                return n
        raise TuningError(f"knob {self.name!r} has no candidate {entity_json!r}")

    def describe(self):
        shown = ", ".join(str(e.to_json()) for e in self.entities[:6])
        more = f", ... ({len(self)} in all)" if len(self) > 6 else ""
        return f"{self.name:<16} {self.kind:<9} {len(self):>6} choices: {shown}{more}"


def factorizations(n, parts, policy, max_factor):
    """Tuples (inner factors) of a split of extent *n* into *parts* loops."""
    if policy == "factors":
        cands = [d for d in range(1, n + 1) if n % d == 0]
    elif policy == "power2":
        cands = [1 << p for p in range(0, max(1, n).bit_length()) if (1 << p) <= n]
    elif policy == "verbose":
        cands = sorted(set([d for d in range(1, n + 1) if n % d == 0]
                           + [1 << p for p in range(0, n.bit_length()) if (1 << p) <= n]))
    else:
        raise TuningError(f"define_split: unknown policy {policy!r}; use 'factors', 'power2' or "
                          "'verbose'")
    if max_factor is not None:
        cands = [c for c in cands if c <= max_factor]
    out = []
    for combo in itertools.product(cands, repeat=parts - 1):
        if math.prod(combo) <= n and (policy != "factors" or n % math.prod(combo) == 0):
            out.append(combo)
    return out


class SplitKnob(Knob):
    kind = "split"

    def __init__(self, name, extent, num_outputs, policy, max_factor, filter_fn, candidate,
                 max_candidates=None):
        if candidate is not None:
            sizes = [tuple(c) for c in candidate]
        else:
            sizes = [(-1,) + f for f in factorizations(extent, num_outputs, policy, max_factor)]
        entities = [SplitEntity(tuple(sz)) for sz in sizes]
        if filter_fn is not None:
            entities = [e for e in entities if filter_fn(e)]
        if max_candidates is not None and len(entities) > max_candidates:
            step = (len(entities) - 1) / max(1, max_candidates - 1)     # evenly spread, ends kept
            entities = [entities[round(n * step)] for n in range(max_candidates)]
        super().__init__(name, entities, self._default(entities))
        self.extent = extent

    @staticmethod
    def _default(entities):
        """Fallback: the innermost factor closest to 16, middle factors closest to 4."""
        def cost(e):
            inner = e.size[1:]
            return sum(abs(math.log2(max(f, 1)) - (4 if n == len(inner) - 1 else 2))
                       for n, f in enumerate(inner))
        return min(range(len(entities)), key=lambda i: cost(entities[i]))


class ReorderKnob(Knob):
    kind = "reorder"

    def __init__(self, name, n_axes, policy, candidate):
        if candidate is not None:
            perms = [tuple(p) for p in candidate]
        elif policy == "all":
            perms = list(itertools.permutations(range(n_axes)))
        elif policy == "identity":
            perms = [tuple(range(n_axes))]
        else:
            raise TuningError(f"define_reorder: unknown policy {policy!r}; use 'all', "
                              "'identity' or candidate=[...]")
        super().__init__(name, [ReorderEntity(p) for p in perms])


class AnnotateKnob(Knob):
    kind = "annotate"
    POLICIES = {"try_unroll": ("none", "unroll"), "try_vec": ("none", "vec"),
                "try_unroll_vec": ("none", "unroll", "vec"), "try_parallel": ("none", "parallel")}

    def __init__(self, name, n_axes, policy, candidate):
        if candidate is not None:
            choices = [tuple(c) for c in candidate]
        else:
            per_axis = self.POLICIES.get(policy)
            if per_axis is None:
                raise TuningError(f"define_annotate: unknown policy {policy!r}; use one of "
                                  f"{', '.join(self.POLICIES)}")
            choices = list(itertools.product(per_axis, repeat=n_axes))
        for c in choices:
            for a in c:
                if a not in ANNOTATIONS:
                    raise TuningError(f"define_annotate {name!r}: unknown annotation {a!r}")
        super().__init__(name, [AnnotateEntity(c) for c in choices])


class OtherKnob(Knob):
    kind = "knob"

    def __init__(self, name, values, default):
        values = list(values)
        if default is not None and default not in values:
            raise TuningError(f"define_knob {name!r}: default {default!r} is not a candidate")
        super().__init__(name, [OtherEntity(v) for v in values],
                         values.index(default) if default is not None else 0)


# configurations ---------------------------------------------------------------------------------

class ConfigEntity(Candidate):
    """One point of a space: an entity per knob.  ``cfg["tile_i"]`` returns that entity.

    As a tuning candidate (:mod:`.candidate`) it is identified by its index.
    """

    kind = CandidateKind.CONFIG

    def __init__(self, space, index):
        self.space = space
        self.index = index
        self._entities = space.entities_at(index)

    @property
    def entities(self):
        """Knob name -> this config's entity, in the order the space defined its knobs (a
        read-only view)."""
        return types.MappingProxyType(self._entities)

    def __getitem__(self, name):
        try:
            return self._entities[name]
        except KeyError:
            raise TuningError(f"config has no knob {name!r}; the template defines "
                              f"{', '.join(self._entities) or 'none'}") from None

    # a template calls define_* on whatever get_config() returns; on a concrete config they are
    # look-ups of knobs the space already has
    def define_split(self, name, *a, **k): return self[name]
    def define_reorder(self, name, *a, **k): return self[name]
    def define_annotate(self, name, *a, **k): return self[name]
    def define_knob(self, name, *a, **k): return self[name]

    @property
    def is_fallback(self):
        return False

    def to_json(self):
        return {"index": self.index,
                "entities": {k: e.to_json() for k, e in self._entities.items()}}

    def knob_indices(self):
        return self.space.point_of(self.index)

    # the candidate interface
    @property
    def key(self):
        return self.index

    @property
    def label(self):
        return f"config {self.index}"

    @property
    def wire(self):
        return self.index

    @property
    def fault_index(self):
        return self.index

    def to_record(self):
        return {"config": self.to_json()}

    def __repr__(self):
        body = ", ".join(f"{k}={e.to_json()}" for k, e in self._entities.items())
        return f"Config[{self.index}]({body})"


class FallbackConfig(ConfigEntity):
    """The template's default point, used when no tuned config is known."""

    def __init__(self, space):
        super().__init__(space, space.default_index())

    @property
    def is_fallback(self):
        return True


class ConfigSpace:
    """The knobs of a template, collected by running it once; iterable by integer index."""

    def __init__(self):
        self.knobs = {}

    # definition API (a template calls these through get_config()) --------------------------
    def _add(self, knob):
        if knob.name in self.knobs:
            return self.knobs[knob.name].entities[self.knobs[knob.name].default_index]
        self.knobs[knob.name] = knob
        return knob.entities[knob.default_index]

    def define_split(self, name, axis, num_outputs=2, policy="factors", max_factor=None,
                     filter=None, candidate=None, max_candidates=None):   # noqa: A002
        """A knob over the ways to split *axis* into *num_outputs* loops.

        ``policy``: ``"factors"`` (exact divisors), ``"power2"`` or ``"verbose"`` (both; splits
        that do not divide are guarded); ``max_factor`` caps each inner factor; ``filter`` keeps
        the entities it accepts; ``candidate`` lists the sizes outright; ``max_candidates`` keeps
        at most that many, evenly spread over the list.
        """
        extent = axis.extent if isinstance(axis, IterVar) else int(axis)
        if num_outputs < 2:
            raise TuningError(f"define_split {name!r}: num_outputs must be at least 2")
        if max_candidates is not None and (not isinstance(max_candidates, int)
                                           or max_candidates < 1):
            raise TuningError(f"define_split {name!r}: max_candidates must be a positive "
                              f"integer, got {max_candidates!r}")
        return self._add(SplitKnob(name, extent, num_outputs, policy, max_factor, filter,
                                   candidate, max_candidates))

    def define_reorder(self, name, axes, policy="all", candidate=None):
        """A knob over orders of *axes*."""
        return self._add(ReorderKnob(name, len(axes), policy, candidate))

    def define_annotate(self, name, axes, policy="try_unroll", candidate=None):
        """A knob over annotations (none/unroll/vec/parallel) of *axes*."""
        return self._add(AnnotateKnob(name, len(axes), policy, candidate))

    def define_knob(self, name, candidates, default=None):
        """A knob over arbitrary values (read them with ``cfg[name].val``)."""
        return self._add(OtherKnob(name, candidates, default))

    def __getitem__(self, name):
        knob = self.knobs.get(name)
        if knob is None:
            raise TuningError(f"knob {name!r} is used before it is defined")
        return knob.entities[knob.default_index]

    @property
    def is_fallback(self):
        return True

    # indexing -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """The number of configurations: the product of the knobs' choices, which a generated
        space can make larger than ``len()`` may return (``sys.maxsize``), so code that sizes a
        space asks this."""
        return math.prod(len(k) for k in self.knobs.values()) if self.knobs else 1

    def __len__(self):
        return self.size

    def __bool__(self):
        return True                 # a space always holds at least one configuration

    @property
    def dims(self):
        return [len(k) for k in self.knobs.values()]

    def point_of(self, index):
        """Knob indices (definition order) of config *index*."""
        if not 0 <= index < self.size:
            raise TuningError(f"config index {index} is outside this space (0..{self.size - 1})")
        point = []
        for d in self.dims:
            point.append(index % d)
            index //= d
        return point

    def index_of(self, point):
        index, scale = 0, 1
        for p, d in zip(point, self.dims):
            index += p * scale
            scale *= d
        return index

    def entities_at(self, index):
        return {k.name: k.entities[p] for k, p in zip(self.knobs.values(), self.point_of(index))}

    def get(self, index) -> ConfigEntity:
        return ConfigEntity(self, index)

    def default_index(self):
        return self.index_of([k.default_index for k in self.knobs.values()])

    def from_json(self, d) -> ConfigEntity:
        """The config a log recorded; checks that its entities match this space."""
        try:
            index = int(d["index"])
            ents = d["entities"]
        except (KeyError, TypeError, ValueError):
            raise TuningError(f"malformed config record {d!r}") from None
        if set(ents) != set(self.knobs):
            raise TuningError(f"config record knobs {sorted(ents)} differ from the template's "
                              f"{sorted(self.knobs)}; was the template changed?")
        point = [k.index_of(ents[k.name]) for k in self.knobs.values()]
        if self.index_of(point) != index:
            raise TuningError(f"config record index {index} does not match its entities; was "
                              "the template changed?")
        return ConfigEntity(self, index)

    def __str__(self):
        lines = [f"ConfigSpace: {self.size} configurations"]
        lines += ["  " + k.describe() for k in self.knobs.values()]
        return "\n".join(lines)

    __repr__ = __str__
