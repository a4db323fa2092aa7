"""Auto-scheduling: a schedule space generated from an operator's declaration, no template.

Map of the parts:
- ``analysis``  the machine model (lanes, registers, cores) and ``DagAnalysis``: per-stage facts
                over the compute DAG (roles, fusion, anchors, packable inputs)
- ``tiles``     tile-size candidates of the multi-level tiling rule
- ``rules``     the rules (``RuleKind``, ``RULES``): where each fires, the knobs it searches
                (named once: ``KnobKind``, ``knob_name``) and how it reads a config's values
- ``plan``      a config read into one ``StagePlan`` per stage (what it decided for the stage)
- ``apply``     the plans as schedule primitives, in phases
- ``generate``  ``generate_space`` and ``SketchSpace`` (config space, steps, default, describe)
- ``seeds``     heuristic first configs (tile sizes from the SIMD width and register file)
"""
from .analysis import MachineModel
from .rules import RuleKind
from .generate import SketchSpace, generate_space

__all__ = ["MachineModel", "RuleKind", "SketchSpace", "generate_space"]
