"""The layers of einloop and the only directions their imports may take.

Every ``import`` and ``from ... import`` in the package is parsed, lazy ones inside functions
included, and resolved to the layer it reaches.  A layer may import itself and the layers listed
as below it; anything else (an upward edge, or an unlisted package) fails with the file and line.
The README's layer table lists the same layers in the same order.
"""
import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "einloop"
README = PACKAGE.parent / "README.md"

#: layer -> the layers it may import, bottom first.  ``runtime`` runs kernels without the compiler:
#: it sees only the errors (and NumPy/ctypes), so a deploy process never loads llvmlite.
LAYERS = {
    "errors": set(),
    "version": set(),
    "ir": {"errors"},
    "arith": {"errors", "ir"},
    "te": {"errors", "ir", "arith"},
    "nn": {"errors", "ir", "arith", "te"},
    "schedule": {"errors", "ir", "arith", "te"},
    "runtime": {"errors"},
    "codegen": {"errors", "ir", "arith", "te", "schedule", "runtime"},
    "autotune": {"errors", "ir", "arith", "te", "schedule", "runtime", "codegen"},
    "torch": {"errors", "ir", "arith", "te", "nn", "schedule", "runtime", "codegen", "autotune"},
    "cli": {"errors", "ir", "arith", "te", "schedule", "runtime", "codegen", "autotune", "demo"},
    "demo": {"errors", "ir", "arith", "te", "schedule", "runtime", "codegen", "autotune"},
}
#: modules every layer may import: the error classes and the version string.
BASE = {"errors", "version"}
#: modules that sit above every layer: the package's front door, which loads layers lazily.
TOP = {"__init__", "__main__"}
#: third-party packages each layer may use (the compiler only below codegen's line).
#: ``torch`` only in the layer of PyTorch custom operators, which nothing in einloop imports.
THIRD_PARTY = {"llvmlite": {"codegen", "autotune", "cli", "demo"}, "torch": {"torch"}}


def _layer_of(module: str) -> str:
    """``einloop.schedule.passes.unroll`` -> ``schedule``."""
    return module.split(".")[1]


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: pathlib.Path):
    """(line, absolute module) of every import in *path*, relative ones resolved."""
    return _imports_in(path.read_text(), _module_name(path), path.name == "__init__.py")


def _imports_in(source: str, module: str, is_package: bool):
    tree = ast.parse(source)
    package = module.split(".")
    if not is_package:
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "einloop" or (node.level and not node.module and len(base) == 1):
                for alias in node.names:          # from einloop import te / from . import te
                    yield node.lineno, f"einloop.{alias.name}"
            else:
                yield node.lineno, module
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) \
                and str(node.args[0].value).startswith("einloop."):
            yield node.lineno, node.args[0].value


def _sources():
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_belongs_to_a_layer():
    for path in _sources():
        name = _module_name(path)
        if name == "einloop" or name.split(".")[-1] in TOP and name.count(".") == 1:
            continue
        assert _layer_of(name) in LAYERS, (
            f"{path.relative_to(PACKAGE.parent)} is in no layer: add its package to "
            "tests/test_layering.py's LAYERS and to the README's layer table")


def test_imports_only_go_down():
    bad = []
    for path in _sources():
        name = _module_name(path)
        if name == "einloop" or (name.count(".") == 1 and name.split(".")[1] in TOP):
            continue
        layer = _layer_of(name)
        for line, target in _imports(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            root = target.split(".")[0]
            if root in THIRD_PARTY and layer not in THIRD_PARTY[root]:
                bad.append(f"{where}: layer '{layer}' imports {target}")
            if root != "einloop":
                continue
            if target == "einloop":
                bad.append(f"{where}: imports the package front door 'einloop' from inside it")
                continue
            other = _layer_of(target)
            if other in BASE:
                continue
            if other != layer and other not in LAYERS.get(layer, set()):
                bad.append(f"{where}: layer '{layer}' imports '{target}' (layer '{other}'), "
                           f"but may only import {sorted(LAYERS[layer]) or 'nothing'}")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_checker_sees_lazy_and_relative_imports():
    """The parser must resolve relative and function-local imports, or the test above is blind."""
    source = ("from ...ir import expr\n"
              "def f():\n"
              "    from ...codegen import jit\n"
              "    import importlib\n"
              "    return importlib.import_module('einloop.autotune')\n")
    found = {m for _, m in _imports_in(source, "einloop.schedule.passes.probe", False)}
    assert {"einloop.ir", "einloop.codegen", "einloop.autotune"} <= found, found


def test_readme_layer_table_matches():
    text = README.read_text()
    rows = re.findall(r"^\|[^|]*\|\s*`einloop/(\w+)/?(?:\.py)?`", text, re.MULTILINE)
    packages = [p for p in rows if p in LAYERS]
    expected = [p for p in LAYERS if (PACKAGE / p).is_dir()]
    assert packages == expected, (
        f"README's layer table lists {packages}, but the layers, bottom first, are {expected}")


#: autotune's sub-packages -> the sub-packages each may import, bottom first.  ``space`` is what
#: can be searched, ``task`` what is tuned (a task owns its space), ``model`` and ``measure`` see
#: neither (they take lowered loop nests and pickled tasks), ``log`` records what a task's
#: candidates measured, ``search`` runs the tuning loop over all of them, and ``symbolic`` drives
#: one search per size hint.  ``api`` (the front door) and the package's ``__init__`` sit on top.
AUTOTUNE = {
    "space": set(),
    "task": {"space"},
    "model": set(),
    "measure": set(),
    "log": {"space", "task", "measure"},
    "search": {"space", "task", "model", "measure", "log"},
    "symbolic": {"space", "task", "model", "measure", "log", "search"},
}
AUTOTUNE_TOP = {"api", "__init__"}


def _autotune_part(module: str) -> str:
    """``einloop.autotune.space.sketch.rules`` -> ``space``; the package itself -> ``__init__``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def test_autotune_sub_packages_import_only_down():
    bad = []
    for path in sorted((PACKAGE / "autotune").rglob("*.py")):
        name = _module_name(path)
        part = _autotune_part(name)
        if part in AUTOTUNE_TOP:
            continue
        assert part in AUTOTUNE, (f"{path.relative_to(PACKAGE.parent)} is in no autotune "
                                  "sub-package: add it to tests/test_layering.py's AUTOTUNE")
        for line, target in _imports(path):
            if not target.startswith("einloop.autotune"):
                continue
            other = _autotune_part(target)
            if other != part and other not in AUTOTUNE[part]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: autotune/{part} imports "
                           f"{target} (autotune/{other}), but may only import "
                           f"{sorted(AUTOTUNE[part]) or 'nothing'} of autotune")
    assert not bad, "imports against autotune's layering:\n" + "\n".join(bad)
#: the one import circle kept: IR nodes print themselves through the printer, which walks them
#: with the IR's visitor (the usual shape of a self-printing IR).
ALLOWED_CIRCLES = [{"einloop.ir.expr", "einloop.ir.printer", "einloop.ir.stmt", "einloop.ir.visit"}]


def _module_exists(module: str) -> bool:
    path = PACKAGE.parent / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _module_graph() -> dict:
    """module -> the einloop modules it imports (lazy imports included; ``from P import m``
    counts as importing the module ``P.m`` when that is a module)."""
    graph = {}
    for path in _sources():
        name = _module_name(path)
        tree = ast.parse(path.read_text())
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{module}.{a.name}" if _module_exists(f"{module}.{a.name}") else module
                           for a in node.names]
            else:
                continue
            deps.update(t for t in targets
                        if t.startswith("einloop.") and t != name and _module_exists(t))
        graph[name] = deps
    return graph


def _circles(graph) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    circles = [c for c in _circles(_module_graph()) if c not in ALLOWED_CIRCLES]
    assert not circles, "import circles (split the module that is both vocabulary and driver):\n" \
        + "\n".join(" <-> ".join(sorted(c)) for c in circles)


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [{"a", "b", "c"}]
