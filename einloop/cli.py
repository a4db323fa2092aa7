"""The ``einloop`` command line.

    einloop demo                                     tune a custom operator, deploy it, compare
    einloop tune MODULE:TEMPLATE --args 1024 1024 1024 --trials 200 --log tuning_logs/x.jsonl
    einloop tune examples/attention.py:attention --args 256 64 --trials 200
                                                     (a function returning tensors: auto-scheduled)
    einloop log tuning_logs/x.jsonl [--code]         summarise a log; print the best schedules
    einloop export MODULE:FUNC --args 1024 1024 1024 --log LOG -o lib.so [--header]
                                                     build the best logged schedule, export it
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from . import autotune
from .autotune.log.record import DEFAULT_DIR
from .autotune.log.summary import best_schedule_code, summarize
from .autotune.measure.cluster.client import cluster_cores, cluster_target
from .autotune.symbolic.points import extent_names, has_symbolic_extents, hint_points
from .autotune.symbolic.tune import search_trials, tune
from .autotune.task.declare import declare_tensors
from .codegen import cache
from .codegen.build import build
from .codegen.export import export_library
from .codegen.target import Target
from .demo import main as demo_main
from .autotune.search.kinds import TunerKind, make_tuner
from .autotune.task.base import import_module
from .errors import Error, TuningError, TuningLogError



def _arg_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _current_folder_importable():
    """Let templates be imported from the current folder, as ``python -m`` does (the
    ``einloop`` script's own folder is first on sys.path instead); spawned workers inherit it."""
    cwd = os.getcwd()
    if not any(os.path.abspath(p or ".") == cwd for p in sys.path):
        sys.path.insert(0, cwd)


def import_template_module(spec):
    """Import the module part of ``MODULE:TEMPLATE`` (a dotted name or a path to a .py file)."""
    if ":" not in spec:
        raise TuningError(f"expected MODULE:TEMPLATE or MODULE:FUNCTION (e.g. "
                          f"examples/attention.py:attention), got {spec!r}")
    module, name = spec.rsplit(":", 1)
    if module.endswith(".py") or os.path.sep in module:
        path = os.path.abspath(module)
        if not os.path.exists(path):
            raise TuningError(f"no such file: {module}")
        folder = os.path.dirname(path)
        if folder not in sys.path:
            sys.path.insert(0, folder)          # so worker processes can import it by name
        mod_name = os.path.splitext(os.path.basename(path))[0]
    else:
        mod_name = module
    import_module(mod_name, spec)
    return mod_name, name


def _shape_hints(items):
    """``["n=1,16,256", "m=8"]`` as ``{"n": [1, 16, 256], "m": [8]}``."""
    hints = {}
    for item in items or ():
        name, _, sizes = item.partition("=")
        try:
            hints[name.strip()] = [int(x) for x in sizes.split(",") if x.strip()]
        except ValueError:
            raise TuningError(f"--shape-hints {item!r}: write NAME=SIZE,SIZE,... (e.g. "
                              "n=1,16,256)") from None
        if not name.strip() or not hints[name.strip()]:
            raise TuningError(f"--shape-hints {item!r}: write NAME=SIZE,SIZE,... (e.g. "
                              "n=1,16,256)")
    return hints


def _target(a) -> str:
    """--target; with --cluster and no --target, the CPU of the cluster's runners."""
    if a.cluster and a.target == "llvm":
        return cluster_target(a.cluster)
    return a.target


def _tune_symbolic(a, module, name, tensors):
    """``einloop tune`` of a function whose operator has symbolic extents: tuned at the hint
    sizes (see einloop.autotune.symbolic.tune)."""
    log = a.log or os.path.join(DEFAULT_DIR, f"{name}.jsonl")
    hints = _shape_hints(a.shape_hints)
    points = hint_points(tensors, hints or None)
    print(f"{name}: symbolic extents {', '.join(extent_names(tensors))}"
          f"; tuning at {len(points)} sizes: {'; '.join(str(p) for p in points)} "
          f"({search_trials(a.trials, len(points))} trials each, the rest of --trials for "
          "measuring their best side by side)")
    option = autotune.measure_option(number=a.number, repeat=a.repeat, timeout=a.timeout,
                                     build_timeout=a.build_timeout, cluster=a.cluster)
    d = tune(tensors, a.trials, hints or None, log, _target(a),
             lambda task: make_tuner(a.tuner, task, a.seed), a.time_budget, option, a.quiet)
    print(f"tuned at {len(points)} sizes; each call runs the schedule measured fastest at the "
          f"nearest of {len(d)} sizes: {d}")
    print(f"log: {log}")
    return 0


def _cores(a, func, target):
    """With --cluster, the threads the runners give a kernel (an auto-scheduled function aims
    its parallel loops at them); else None (this process's, or the template's knobs)."""
    if not a.cluster or not callable(func) or hasattr(func, "template_name"):
        return None
    return cluster_cores(a.cluster, str(Target.parse(target)))


def cmd_tune(a):
    module, name = import_template_module(a.template)
    func = getattr(sys.modules.get(module), name, None)
    if callable(func) and not hasattr(func, "template_name"):
        values = [_arg_value(x) for x in a.args]
        tensors = declare_tensors(func, tuple(values), {},
                                  f"{name}({', '.join(map(repr, values))})")
        if isinstance(tensors, (list, tuple)) and has_symbolic_extents(tensors):
            return _tune_symbolic(a, module, name, list(tensors))
    if a.shape_hints:
        raise TuningError(f"--shape-hints: {a.template} declares no symbolic extents "
                          "(te.var / te.size_var)")
    target = _target(a)
    task = autotune.create_task(name, [_arg_value(x) for x in a.args], target=target,
                                module=module, cores=_cores(a, func, target))
    log = a.log or os.path.join(DEFAULT_DIR, f"{name}.jsonl")
    print(f"task {task.workload}: {task.flop / 1e9:.3f} GFLOP per call")
    if task.kind is autotune.TaskKind.AUTO:
        print(f"auto-scheduled from its DAG (structural hash {task.dag_hash[:12]}):")
        describe = getattr(task.sketch, "describe", None)
        if describe:
            print(describe())
    print(task.config_space)
    tuner = make_tuner(a.tuner, task, a.seed)
    option = autotune.measure_option(number=a.number, repeat=a.repeat, timeout=a.timeout,
                                     build_timeout=a.build_timeout, cluster=a.cluster)
    tuner.tune(a.trials, measure_option=option, callbacks=[autotune.log_to_file(log)],
               early_stopping=a.early_stopping, time_budget_s=a.time_budget, quiet=a.quiet)
    if tuner.best_config is None:
        print("no valid configuration yet (interrupted before any finished)")
        return 1
    print(f"best: {tuner.best_gflops:.1f} GFLOP/s ({tuner.best_cost * 1e3:.3f} ms), "
          f"{tuner.best_config}")
    print(f"log: {log}")
    return 0


def cmd_log(a):
    if not os.path.isfile(a.path):
        what = "is a folder, not a tuning log" if os.path.isdir(a.path) else "does not exist"
        raise TuningLogError(f"{a.path} {what}; give the .jsonl file a tuning job wrote (by "
                             f"default under {DEFAULT_DIR}/)")
    summary = summarize(a.path)
    if a.plot:
        from .autotune.log.curves import plot_curves
        panels = plot_curves(a.path, a.plot)
        print(summary)
        print(f"\ntuning curves of {panels} workload(s) drawn to {a.plot}")
        return 0
    if not a.code:
        print(summary)
        return 0
    # the whole output is a Python file: the summary as comments, then the code
    print("\n".join(f"# {line}".rstrip() for line in summary.splitlines()))
    print()
    print(best_schedule_code(a.path))
    return 0


def cmd_export(a):
    """Build the best logged schedule of a template or auto-scheduled function; export it."""
    if not os.path.isfile(a.log):
        raise TuningLogError(f"no tuning log at {a.log}; tune first (einloop tune "
                             f"{a.template} --args ... --log {a.log})")
    module, name = import_template_module(a.template)
    task = autotune.create_task(name, [_arg_value(x) for x in a.args], target=a.target,
                                module=module)
    with autotune.apply_history_best(a.log, target=a.target, strict=not a.allow_untuned) as ctx:
        s, args = ctx.instantiate(task)
    kernel = build(s, args, target=a.target, name=a.name or name)
    path = export_library([kernel], a.output, header=a.header)
    tuned = "tuned" if ctx.hits else "untuned"
    header = f" (+ {os.path.splitext(path)[0]}.h)" if a.header else ""
    print(f"exported {task.workload} as kernel {kernel.name!r} ({tuned} schedule) to "
          f"{path}{header}")
    return 0


def cmd_cache(a):
    """Show the compile cache (where, entries, size, limit), or empty it."""
    directory, n, size = cache.info()
    if directory is None:
        print("the compile cache is off (EINLOOP_CACHE=0)")
        return 0
    if a.clear:
        print(f"deleted {cache.clear()} entries ({size / 2**20:.1f} MB) from {directory}")
        return 0
    print(f"compile cache {directory}: {n} entries, {size / 2**20:.1f} MB of "
          f"{cache.max_bytes() / 2**20:.0f} MB (EINLOOP_CACHE_MAX_MB)")
    return 0


def make_parser() -> argparse.ArgumentParser:
    """The command line's parser (the README's test parses its commands with it)."""
    parser = argparse.ArgumentParser(prog="einloop", description="einloop tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="tune a custom operator, reuse the tuned schedule, and "
                                       "compare it with the untuned one and NumPy")
    demo.add_argument("--size", type=int, default=512, help="M = N = K (default 512)")
    demo.add_argument("--trials", type=int, default=48, help="tuning trials (default 48; 0 "
                                                            "deploys from the log, no tuning)")

    tune = sub.add_parser("tune", help="run a tuning job for a template, or auto-schedule a "
                                       "function that returns its tensors")
    tune.add_argument("template", help="MODULE:TEMPLATE or MODULE:FUNCTION, MODULE a dotted "
                                       "name or a .py path")
    tune.add_argument("--args", nargs="*", default=[], help="template or function arguments "
                                                            "(JSON values)")
    tune.add_argument("--trials", type=int, default=200)
    tune.add_argument("--log", help="log path (default tuning_logs/TEMPLATE.jsonl); a job "
                                    "resumes from its log")
    tune.add_argument("--tuner", choices=[k.value for k in TunerKind], default="xgb")
    tune.add_argument("--seed", type=int)
    tune.add_argument("--target", default="llvm")
    tune.add_argument("--number", type=int, default=5)
    tune.add_argument("--repeat", type=int, default=3)
    tune.add_argument("--timeout", type=float, default=10.0, help="seconds per candidate run")
    tune.add_argument("--build-timeout", type=float, help="seconds per candidate build "
                                                          "(default: --timeout)")
    tune.add_argument("--early-stopping", type=int, help="stop after N trials without progress")
    tune.add_argument("--time-budget", type=float, help="start no new batch after S seconds")
    tune.add_argument("--quiet", action="store_true")
    tune.add_argument("--cluster", metavar="ADDRESS", help="measure on this Dask cluster, e.g. "
                      "tcp://scheduler:8786: builds on any worker, timings on the workers "
                      "started with --resources \"einloop-runner=1\" (needs "
                      "pip install einloop[distributed])")
    tune.add_argument("--shape-hints", nargs="*", metavar="NAME=SIZES",
                      help="for an operator with symbolic extents: the sizes to tune at, e.g. "
                           "n=1,16,256,2048 (default 1,16,256,2048 per extent)")

    log = sub.add_parser("log", help="summarise a tuning log")
    log.add_argument("path")
    log.add_argument("--code", action="store_true", help="print each best config or step list "
                                                         "as schedule code (imports the "
                                                         "templates or DAG functions)")
    log.add_argument("--plot", metavar="IMAGE", help="also draw each workload's best time so "
                                                     "far against its trials to IMAGE (.png, "
                                                     ".svg; needs matplotlib: einloop[plot])")
    export = sub.add_parser("export", help="build the best logged schedule and write it as a "
                                           "shared library with its metadata")
    export.add_argument("template", help="MODULE:TEMPLATE or MODULE:FUNCTION, as for tune")
    export.add_argument("--args", nargs="*", default=[], help="template or function arguments "
                                                              "(JSON values)")
    export.add_argument("--log", required=True, help="the tuning log to take the best from")
    export.add_argument("-o", "--output", required=True, help="the library to write (.so)")
    export.add_argument("--header", action="store_true", help="also write a C header (.h)")
    export.add_argument("--name", help="the kernel's name in the library (default: FUNC)")
    export.add_argument("--target", default="llvm")
    export.add_argument("--allow-untuned", action="store_true", help="export the untuned "
                                                                     "schedule when the log has "
                                                                     "nothing for it")
    cache = sub.add_parser("cache", help="show the compile cache (where, entries, size), or "
                                         "empty it")
    cache.add_argument("--clear", action="store_true", help="delete every entry")
    return parser


def main(argv=None):
    a = make_parser().parse_args(argv)
    _current_folder_importable()
    try:
        if a.command == "demo":
            return demo_main(a.size, a.trials)
        if a.command == "tune":
            return cmd_tune(a)
        if a.command == "export":
            return cmd_export(a)
        if a.command == "cache":
            return cmd_cache(a)
        return cmd_log(a)
    except Error as exc:
        print(f"einloop: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("einloop: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
