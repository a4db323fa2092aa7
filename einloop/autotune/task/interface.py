"""The interface of a task: what measurement, tuners, logs and deployment may ask of one.

Two front ends implement it: :class:`~.template.Task` (a registered template; candidates are
configurations of its knobs) and :class:`~.auto.AutoTask` (an operator tuned in the space
generated from its declaration; candidates are configurations measured as step lists, or step
lists).  Nothing outside ``task/`` needs to know which one it holds.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .base import TaskKind


@runtime_checkable
class TuningTask(Protocol):
    """One operator with fixed arguments on one target, and the schedules it may be given."""

    kind: TaskKind
    name: str               # the template's or the declaring function's name
    module: str | None      # where workers import it from (None: sent by value)
    args: tuple             # JSON-native arguments
    kwargs: dict
    target: str             # the normalised target string records carry
    target_spec: str        # the target as the user gave it (workers parse it again)
    cpu: str                # the target's CPU name
    flop: int               # float operations of one run
    config_space: Any       # the ConfigSpace tuners search
    reference_name: str     # what the reference candidate is, for messages

    @property
    def workload_key(self) -> str:
        """What the task's records are keyed by in a log."""

    def candidate(self, x) -> Any:
        """*x* (a candidate, its wire form, or what a user passes) checked and normalised;
        TuningError if it is not one of this task's."""

    def schedule_key(self, candidate) -> Any:
        """What identifies the schedule *candidate* makes: candidates with one key are one
        schedule, measured once (many configs of a generated space make the same steps)."""

    def reference_candidate(self) -> Any:
        """The candidate whose outputs are the correctness reference (a template's fallback
        config, an auto task's generated default schedule)."""

    def instantiate(self, candidate) -> tuple:
        """``(schedule, argument tensors)`` of *candidate*."""

    def instantiate_reference(self) -> tuple:
        """The same of the reference candidate, whose shapes size the measured arrays."""

    def candidate_from_json(self, d: dict) -> Any:
        """The candidate of a record's dict; TuningLogError if it does not fit this task."""

    def to_json(self) -> dict:
        """The record's ``"task"`` field."""

    def code(self, candidate) -> str:
        """*candidate* as readable schedule code (``einloop log --code``)."""
