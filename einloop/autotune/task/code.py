"""A tuned configuration as Python that rebuilds its schedule, to read, paste and run as is.

The code creates the task, declares the template's tensors under the configuration (a template's
declarations may depend on its knobs), then writes the schedule out step by step the way a user
would: ``i, j = s[C].op.axis``, ``i_outer, i_inner = s[C].split(i, factor=4)``, ...  Each step
prints through the step registry (:class:`~einloop.schedule.replay.CodePrinter`), which replays
it on a fresh schedule while printing, so every loop a step names is bound to the Python variable
that holds it.
"""
from __future__ import annotations

from ...schedule.replay import CodePrinter
from .module_path import import_lines

_TAKEN = {"s", "task", "config", "args", "autotune", "create_schedule", "lower", "template_s"}


def config_code(task, config) -> str:
    """Python code that declares *task*'s tensors under *config* and schedules them step by
    step; running it binds ``s`` and ``args`` (``lower(s, args)`` is the config's loop nest)."""
    schedule, args = task.instantiate(config)
    kwargs = f", kwargs={dict(task.kwargs)!r}" if task.kwargs else ""
    # the module is imported and the template named bare: with module=, create_task would take
    # the module's attribute of that name, which may be a plain function of the same name
    imports = [*import_lines(task.module),
               f"import {task.module}   # registers the template {task.name!r}"] \
        if task.module and task.module != "__main__" else []
    head = [
        "from einloop import autotune, create_schedule, lower",
        *imports,
        "",
        f"task = autotune.create_task({task.name!r}, {list(task.args)!r}{kwargs}, "
        f"target={task.target_spec!r})",
        f"config = task.config_space.from_json({config.to_json()!r})",
    ]
    taken = _TAKEN | ({task.module.split(".")[0], "sys"} if imports else set())
    p = CodePrinter(schedule.outputs, reserved=taken)
    arg_names = p.bind_tensors(args)
    p.lines.append(f"{', '.join(arg_names)}{',' if len(args) == 1 else ''} = args")
    outs = [p.tensor_of(p.s[t], f"template_s.outputs[{n}]")
            for n, t in enumerate(schedule.outputs)]
    p.lines.append(f"s = create_schedule([{', '.join(outs)}])")
    for st in schedule.steps:
        p.step(st)
    own = "template_s" if any("template_s" in line for line in p.lines) else "_"
    head.append(f"{own}, args = task.instantiate(config)   # the tensors, declared for this config")
    return "\n".join(head + p.lines + ["print(lower(s, args))"])
