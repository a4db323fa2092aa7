"""``generate_space``: an operator's schedule space from its DAG alone, as a generated template.

The rules (:mod:`.rules`) add knobs to an ordinary
:class:`~einloop.autotune.space.knobs.ConfigSpace`, so every tuner searches it unchanged;
:meth:`SketchSpace.steps` turns a config into the step list that the log stores and deploy
replays.  A rule that cannot handle an operator costs its sketch, never the space: the space
is validated on the default config and rebuilt with the failing rule switched off (rfactor,
then packing, then tiling, then everything but the plain schedule).  Such a failure is a bug
in einloop, so it is not silent: for every rule that failed, a
:class:`~einloop.errors.RuleFailureWarning` (once per rule, stage and error) names the rule,
the stage and the error, and with ``EINLOOP_STRICT_RULES=1`` (the test suite's setting) the
first of them raises.
"""
from __future__ import annotations

import enum
import os
import warnings

from ....errors import Error, InternalError, RuleFailureWarning
from ....schedule.schedule import Schedule, create_schedule
from ....schedule.steps import StepKind
from ....schedule.verify import verify
from ....te.dag import ComputeDAG
from ....te.residues import (residue_splits, strided_reads, with_deinterleaved,
                              with_residues)
from ....te.tensor import Tensor
from ..knobs import ConfigSpace
from .analysis import DagAnalysis, MachineModel, Role, StageFacts
from .apply import apply_plan, plain_schedule
from .plan import StagePlan, knob_values, plan_of
from . import seeds
from .tensor_probe import tensor_candidates
from .rules import RULES, KnobKind, RuleKind, fires_tiling, knob_name


class Relax(enum.IntEnum):
    """How much of the rule set a space uses; each step drops what failed on the operator."""
    ALL = 0
    NO_RESIDUES = 1
    NO_RFACTOR = 2
    NO_PACK = 3
    NO_TILING = 4
    PLAIN = 5


class SketchSpace:
    """The generated space of one operator: ``config_space`` for the tuners, ``steps(config)``
    for the schedule of a config, ``default_steps()`` for the safe fast reference."""

    def __init__(self, outputs, target="llvm", relax=Relax.ALL):
        outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        self.outputs = outputs
        self.relax = relax
        # the residue-class rule rewrites the DAG before the other rules see it: its steps
        # come first in every config's step list, and the rules plan the rewritten stages
        self.prelude, self.rewritten = residue_prelude(outputs) if relax < Relax.NO_RESIDUES \
            else ((), outputs)
        self.analysis = DagAnalysis(self.rewritten, target)
        self.plain_analysis = DagAnalysis(outputs, self.analysis.machine) if self.prelude \
            else self.analysis
        self.machine = self.analysis.machine
        an = self.analysis
        if relax >= Relax.NO_TILING:
            for f in an.stages():
                if f.role in (Role.TILED, Role.FUSED):
                    f.role, f.fused_into = Role.ROOT, None
            for f in an.stages():
                if f.role in (Role.FLEXIBLE, Role.ROW):
                    f.anchor = an.anchor_of(f.op)
        self.rfactor_ok = relax < Relax.NO_RFACTOR
        if relax >= Relax.NO_PACK:
            for f in an.stages():
                f.packable = ()
        self.config_space = ConfigSpace()
        self.fired = {}
        if relax < Relax.PLAIN:
            tensor_candidates(an)           # the tensorize rule's offers, before its knobs
            self._define()
        self._fired()

    # the space ----------------------------------------------------------------------------------
    def _define(self):
        for rule in RULES:
            if rule.define is not None:
                rule.define(self.config_space, self.analysis, self.rfactor_ok)

    def _fired(self):
        an = self.analysis
        fired = {f.name: [] for f in an.stages()}
        if self.relax >= Relax.PLAIN:
            for f in an.stages():
                fired[f.name] = [RuleKind.INLINE] if an.dag.is_inlinable(f.op) \
                    else [RuleKind.FALLBACK]
        else:
            for st in self.prelude:
                suffix = "res" if st.kind is StepKind.SPLIT_RESIDUES else "deint"
                fired[f"{st.stage}.{suffix}"].append(RuleKind.RESIDUE_CLASSES)
            for rule in RULES:
                for name in rule.fires(an, self.rfactor_ok):
                    fired[name].append(rule.kind)
        self.fired = {k: tuple(v) for k, v in fired.items()}

    # schedules ----------------------------------------------------------------------------------
    def schedule(self, config=None) -> Schedule:
        """A fresh schedule of the outputs with *config* (a ConfigEntity, an index, or None
        for the default config) applied."""
        if self.relax >= Relax.PLAIN:
            return plain_schedule(create_schedule(self.outputs), self.analysis)
        s = self._planned(config)
        if not self.prelude:
            return s
        # the same steps on the declaration itself, as deploy replays them
        return create_schedule(self.outputs).apply_steps(self.prelude + tuple(s.steps))

    def steps(self, config) -> tuple:
        """The schedule of *config* as a replayable step list.  A config whose steps do not
        apply raises the einloop.Error that says why (a failed build to the tuner).  The
        prelude's steps come first; they are not replayed here (the tuner asks for thousands of
        configs; the space's validation replays the default config's steps whole)."""
        if self.relax >= Relax.PLAIN:
            return tuple(self.schedule(config).steps)
        return self.prelude + tuple(self._planned(config).steps)

    def _planned(self, config):
        """The rewritten DAG's schedule with *config*'s plan applied."""
        if config is None:
            config = self.config_space.default_index()
        if isinstance(config, int):
            config = self.config_space.get(config)
        return apply_plan(create_schedule(self.rewritten), self.analysis,
                          plan_of(self.analysis, knob_values(config), self.rfactor_ok))

    @property
    def tensorize_skipped(self) -> list:
        """``(stage, intrinsic, reason)`` of every tensorized sketch the tensorize rule tried
        and did not offer (:mod:`.tensor_rules`)."""
        return list(tensor_candidates(self.analysis).skipped) if self.relax < Relax.PLAIN \
            else []

    def default_steps(self) -> tuple:
        """The safe fast schedule (inline, parallel, vectorize; no tiling): the correctness
        reference of every candidate and the deploy-time fallback."""
        return tuple(plain_schedule(create_schedule(self.outputs), self.plain_analysis).steps)

    def seed_configs(self, n=8) -> list:
        """Up to *n* heuristic configs (ConfigEntity), best guess first."""
        return seeds.seed_configs(self, n)

    # text ---------------------------------------------------------------------------------------
    def describe(self) -> str:
        an = self.analysis
        lines = [f"auto-schedule space of {', '.join(t.name for t in self.outputs)}: "
                 f"{self.config_space.size} configs, {len(self.config_space.knobs)} knobs"
                 + ("" if self.relax is Relax.ALL else f" (rules relaxed: {self.relax.name})")]
        for f in an.stages():
            rules = ", ".join(r.value for r in self.fired[f.name])
            extra = ""
            if f.fused_into is not None:
                extra = f"; fused into {an[f.fused_into].name}"
            elif f.anchor is not None and RuleKind.COMPUTE_LOCATION in self.fired[f.name]:
                extra = f"; may be computed at {an[f.anchor].name}"
            lines.append(f"  {f.name:<16} {f.role.value:<9} {rules}{extra}")
        for k in self.config_space.knobs.values():
            lines.append("    " + k.describe())
        other = tensor_candidates(an).computes_other if self.tensorize_skipped else set()
        for stage, intrin, why in self.tensorize_skipped:
            if (stage, intrin) not in other:
                lines.append(f"  tensorize {stage} with {intrin}: not offered: {why}")
        for stage in sorted({st for st, _ in other}):
            count = sum(1 for st, _ in other if st == stage)
            lines.append(f"  tensorize {stage}: {count} intrinsic(s) of this target not "
                         "offered: they take other operand or accumulator types")
        return "\n".join(lines)

    def __repr__(self):
        return f"SketchSpace({', '.join(t.name for t in self.outputs)}: " \
               f"{self.config_space.size} configs)"


def residue_prelude(outputs) -> tuple:
    """``(steps, rewritten outputs)``: a ``split_residues`` step for every reduction whose
    indices divide a data axis by a constant (:func:`~einloop.te.residues.residue_splits`), a
    ``deinterleave`` step for every tensor a reduction reads with a stride along its last data
    axis (:func:`~einloop.te.residues.strided_reads`), and the DAG so rewritten; ``((),
    outputs)`` when nothing qualifies.  Stages of one name (which steps could not tell apart)
    are left alone."""
    ops = ComputeDAG(outputs).ops
    names = [op.name for op in ops]
    unique = {n for n in names if names.count(n) == 1}
    splits_todo = [op.name for op in ops if op.name in unique and residue_splits(op)]
    strided_todo = [op.name for op in ops if op.name in unique
                    and any(t.op.name in unique for t, _ in strided_reads(op))]
    if not splits_todo and not strided_todo:
        return (), outputs
    s, rewritten = create_schedule(outputs), outputs

    def current(name):
        return next(o for o in ComputeDAG(rewritten).ops if o.name == name)
    for name in splits_todo:
        op = current(name)
        splits = residue_splits(op)
        stage = s.stage_named(name)
        s.split_residues(stage.origin_op.output(),
                         [stage.iter_var(iv.name) for iv, _ in splits], [c for _, c in splits])
        rewritten = with_residues(rewritten, op, splits)
    for name in strided_todo:
        op = current(name)
        for tensor, stride in strided_reads(op):
            if tensor.op.name not in unique:
                continue
            s.deinterleave(s.stage_named(tensor.op.name).origin_op.output(), stride,
                           [s.stage_named(name)])
            rewritten = with_deinterleaved(rewritten, op, tensor, stride)
            op = current(name)
    return tuple(s.steps), rewritten


def _args(outputs, an):
    return list(an.dag.inputs) + list(outputs)


def _failure(sp):
    """What goes wrong with the default config or an accumulator level (applying them, or
    verifying the schedule), as the exception; None when all of them work."""
    try:
        configs = [sp.config_space.default_index()]
        cache_knobs = {knob_name(KnobKind.CACHE, f) for f in fires_tiling(sp.analysis)}
        for name, knob in sp.config_space.knobs.items():
            if name in cache_knobs:
                for n in range(len(knob)):
                    point = sp.config_space.point_of(configs[0])
                    point[list(sp.config_space.knobs).index(name)] = n
                    configs.append(sp.config_space.index_of(point))
        for c in configs:
            verify(sp.schedule(c), _args(sp.outputs, sp.analysis))
        verify(create_schedule(sp.outputs).apply_steps(sp.default_steps()),
               _args(sp.outputs, sp.analysis))
        return None
    except Exception as exc:    # noqa: BLE001 -- generate_space reports it, once per rule
        return exc


#: the environment variable that turns a rule's failure into an InternalError
STRICT_RULES = "EINLOOP_STRICT_RULES"
#: the rule a space of each relaxation goes without, beyond those of the level before it
#: (the plain space goes without every rule but the plain schedule)
DROPPED = {Relax.NO_RESIDUES: RuleKind.RESIDUE_CLASSES, Relax.NO_RFACTOR: RuleKind.RFACTOR, Relax.NO_PACK: RuleKind.PACK,
           Relax.NO_TILING: RuleKind.MULTI_LEVEL_TILING}
_warned: set = set()


def generate_space(outputs, target="llvm", cores=None) -> SketchSpace:
    """The schedule space of the operator computing *outputs* (a tensor or a list), generated
    by the auto-scheduler's rules from its declaration alone, for *target*: a target spec
    (its :class:`MachineModel` read as :meth:`MachineModel.of` with *cores*) or the model."""
    if not isinstance(target, MachineModel):
        target = MachineModel.of(target, cores)
    failures = []                   # (relaxation, exception) of every relaxation that failed
    for relax in Relax:
        if relax is Relax.PLAIN:
            sp = SketchSpace(outputs, target, relax)
            break
        try:
            sp = SketchSpace(outputs, target, relax)
            error = _failure(sp)
        except Error:
            raise
        except Exception as exc:    # noqa: BLE001 -- reported below: the rule is a bug to fix
            error = exc
        if error is None:
            break
        failures.append((relax, error))
    for relax, error in _blamed(failures):
        _report(sp, Relax(relax + 1), error)
    return sp


def _blamed(failures):
    """The *failures* (of consecutive relaxations, first first) to report, one per rule: the
    failure of relaxation L is the rule that relaxation L + 1 drops, unless L + 1 failed with
    the same error (type and message), which is then a later rule's."""
    return [(relax, error) for n, (relax, error) in enumerate(failures)
            if n + 1 == len(failures) or not _same(failures[n + 1][1], error)]


def _same(a, b) -> bool:
    return type(a) is type(b) and str(a) == str(b)


def _report(sp, relax, error):
    """Say that the rule relaxation *relax* drops (every rule but the plain schedule, for
    PLAIN) raised *error*: a warning once per rule, stage and error, or an InternalError under
    ``EINLOOP_STRICT_RULES=1``."""
    stage = _stage_of(error)
    rule = DROPPED.get(relax)
    what = f"the {rule.value} rule" if rule else "a rule (only the plain schedule is left)"
    message = (f"auto-scheduling {', '.join(t.name for t in sp.outputs)}: {what} failed"
               f"{f' on stage {stage}' if stage else ''} with {type(error).__name__}: {error}; "
               f"its space is generated without it (rules relaxed: {sp.relax.name}), so its "
               "schedules may be slower. This is a bug in einloop: please report it")
    if os.environ.get(STRICT_RULES, "").strip() not in ("", "0"):
        raise InternalError(message) from error
    key = (relax, stage, type(error).__name__, str(error))
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuleFailureWarning, stacklevel=3)


def _stage_of(error):
    """The name of the stage a rule was working on when it raised *error* (the innermost frame
    of its traceback holding a stage's facts or plan), or None (a failed verification names
    its stage in its message)."""
    tb, stage = error.__traceback__, None
    while tb is not None:
        local = tb.tb_frame.f_locals
        held = [local[k] for k in ("f", "p") if isinstance(local.get(k), (StageFacts, StagePlan))]
        held += [v for v in local.values() if isinstance(v, (StageFacts, StagePlan))]
        stage = _facts(held[0]).name if held else stage
        tb = tb.tb_next
    return stage


def _facts(held):
    return held.facts if isinstance(held, StagePlan) else held
