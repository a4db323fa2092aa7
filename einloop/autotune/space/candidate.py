"""What a tuner measures: one candidate schedule of a task, in one of two forms.

* a template configuration (:class:`~einloop.autotune.space.knobs.ConfigEntity`): an index into the
  configuration space of a ``@template``, whose function applies the schedule;
* a step list (:class:`StepsCandidate`): replayable schedule steps
  (:class:`einloop.schedule.steps.Step`) over a compute DAG, with no template at all.

The measurement, records and deployment handle candidates through this interface only, and the
task that owns a candidate turns it into a schedule (``task.instantiate(candidate)``):

``kind``         which form (:class:`CandidateKind`)
``key``          hashable identity within its task (visited sets, resuming, de-duplication)
``label``        how messages name it ("config 17", "step list 3f2a9c1b (12 steps)")
``wire``         the small picklable value sent to a build worker (``task.candidate(wire)``
                 turns it back into the candidate)
``fault_index``  the index ``EINLOOP_RUNNER_FAULT`` matches (test hook), or None
``to_record()``  the candidate's field of a log record: ``{"config": {...}}`` or
                 ``{"steps": [...]}``
"""
from __future__ import annotations

from dataclasses import dataclass
import enum
import functools
import hashlib
import json

from ...errors import Error, TuningError, TuningLogError
from ...schedule.steps import Step, steps_from_json, steps_to_json


class CandidateKind(enum.Enum):
    CONFIG = "config"
    STEPS = "steps"


class Candidate:
    """Base of the two candidate forms (see the module docstring)."""
    kind: CandidateKind

    @property
    def key(self):
        raise NotImplementedError

    @property
    def label(self) -> str:
        raise NotImplementedError

    @property
    def wire(self):
        raise NotImplementedError

    @property
    def fault_index(self):
        return None

    def to_record(self) -> dict:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class StepsCandidate(Candidate):
    """A schedule as its replayable step list (applied to a fresh schedule of the DAG)."""
    steps: tuple

    kind = CandidateKind.STEPS

    def __post_init__(self):
        steps = tuple(self.steps)
        bad = [st for st in steps if not isinstance(st, Step)]
        if bad:
            raise TuningError(f"a step-list candidate holds schedule steps (Step), got "
                              f"{bad[0]!r}")
        object.__setattr__(self, "steps", steps)

    @classmethod
    def of(cls, schedule) -> StepsCandidate:
        """The candidate that replays the steps recorded on *schedule*."""
        return cls(tuple(schedule.steps))

    @classmethod
    def from_json(cls, obj) -> StepsCandidate:
        """Parse a record's ``"steps"`` list; a malformed one raises an einloop Error."""
        return cls(tuple(steps_from_json(obj)))

    def to_json(self) -> list:
        return steps_to_json(self.steps)

    @functools.cached_property
    def key(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @property
    def label(self) -> str:
        digest = hashlib.sha1(self.key.encode()).hexdigest()[:8]
        return f"step list {digest} ({len(self.steps)} steps)"

    @property
    def wire(self):
        return self

    def to_record(self) -> dict:
        return {"steps": self.to_json()}

    def __eq__(self, other):
        return isinstance(other, StepsCandidate) and other.key == self.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"StepsCandidate({self.label})"


def record_kind(d, where) -> CandidateKind:
    """Which candidate form a record dict *d* holds (exactly one of "config" and "steps")."""
    kinds = [k for k in CandidateKind if k.value in d]
    if len(kinds) != 1:
        raise TuningLogError(f"{where}: a record holds exactly one candidate, \"config\" or "
                             f"\"steps\"; this one has {len(kinds) or 'none'}")
    return kinds[0]


def check_record_candidate(d, where) -> None:
    """Validate the candidate field of record dict *d*; TuningLogError naming *where*."""
    kind = record_kind(d, where)
    if kind is CandidateKind.CONFIG:
        if not isinstance(d["config"], dict):
            raise TuningLogError(f"{where}: the record's \"config\" is not an object")
        return
    try:
        StepsCandidate.from_json(d["steps"])
    except Error as exc:
        raise TuningLogError(f"{where}: the record's step list is malformed: {exc}") from None
