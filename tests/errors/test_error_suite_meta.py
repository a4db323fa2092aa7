"""Meta-test of the error suite: every test pins a specific einloop error class and its message.

Read statically (``ast``) from the suite's source, so it also covers ``xfail`` tests, whose
bodies never finish.  Rules, per ``test_*`` function:

- it calls ``pytest.raises`` at least once, unless it is named ``test_accepts_*`` (a near-miss
  that must be accepted);
- every ``pytest.raises`` names one class of :mod:`einloop.errors` that is a strict subclass of
  :class:`einloop.errors.Error` (not ``Error``, ``Exception``, a tuple or ``InternalError``), and
  passes a non-empty ``match=``;
- every ``xfail`` mark is ``strict=True`` and gives a ``reason=``.
"""
import ast
import inspect
from pathlib import Path

import pytest

import einloop.errors as errors

HERE = Path(__file__).parent
SUITE = ("test_te_errors.py", "test_schedule_errors.py", "test_tuple_reduce_errors.py",
         "test_scan_errors.py",
         "test_scatter_errors.py", "test_lowprec_errors.py")


def _is_pytest_attr(node, attr):
    return (isinstance(node, ast.Attribute) and node.attr == attr
            and isinstance(node.value, ast.Name) and node.value.id == "pytest")


def _error_class(node):
    """The einloop.errors class a ``pytest.raises`` argument names, or None."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) \
        else None
    cls = getattr(errors, name, None) if name else None
    return cls if inspect.isclass(cls) else None


def _xfail_marks(fn):
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) \
                and dec.func.attr == "xfail":
            yield dec


def check_source(source, filename="<suite>"):
    """Problems found in the test functions of *source* (an empty list when it follows the rules)."""
    problems = []
    tree = ast.parse(source, filename)
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    if not tests:
        problems.append(f"{filename}: no tests")
    for fn in tests:
        where = f"{filename}::{fn.name}"
        raises = [c for c in ast.walk(fn)
                  if isinstance(c, ast.Call) and _is_pytest_attr(c.func, "raises")]
        if not raises and not fn.name.startswith("test_accepts_"):
            problems.append(f"{where}: no pytest.raises (name it test_accepts_* if it must pass)")
        for call in raises:
            cls = _error_class(call.args[0]) if call.args else None
            if cls is None or not issubclass(cls, errors.Error) or cls is errors.Error:
                got = ast.unparse(call.args[0]) if call.args else "nothing"
                problems.append(f"{where}: pytest.raises({got}) is not a specific einloop error "
                                "class (a strict subclass of einloop.errors.Error)")
            match = next((k.value for k in call.keywords if k.arg == "match"), None)
            if not isinstance(match, (ast.Constant, ast.JoinedStr)) or \
                    (isinstance(match, ast.Constant) and not match.value):
                problems.append(f"{where}: pytest.raises without a literal, non-empty match=")
        for mark in _xfail_marks(fn):
            kw = {k.arg: k.value for k in mark.keywords}
            strict = kw.get("strict")
            if not (isinstance(strict, ast.Constant) and strict.value is True):
                problems.append(f"{where}: xfail must be strict=True")
            if "reason" not in kw:
                problems.append(f"{where}: xfail without reason=")
    return problems


@pytest.mark.parametrize("filename", SUITE)
def test_every_test_asserts_a_specific_einloop_error(filename):
    problems = check_source((HERE / filename).read_text(), filename)
    assert not problems, "\n".join(problems)


def test_suite_covers_each_layer():
    used = set()
    for filename in SUITE:
        for node in ast.walk(ast.parse((HERE / filename).read_text())):
            if isinstance(node, ast.Call) and _is_pytest_attr(node.func, "raises") and node.args:
                used.add(_error_class(node.args[0]))
    assert {errors.TEError, errors.ScheduleError, errors.BuildError} <= used


# the checker itself --------------------------------------------------------------------------------

GOOD = '''
def test_ok():
    with pytest.raises(TEError, match=r"shape"):
        f()
def test_accepts_it():
    f()
'''


@pytest.mark.parametrize("bad, complaint", [
    ('def test_x():\n    with pytest.raises(Exception, match="a"):\n        f()\n',
     "not a specific einloop error"),
    ('def test_x():\n    with pytest.raises(Error, match="a"):\n        f()\n',
     "not a specific einloop error"),
    ('def test_x():\n    with pytest.raises(InternalError, match="a"):\n        f()\n',
     "not a specific einloop error"),
    ('def test_x():\n    with pytest.raises((TEError, ScheduleError), match="a"):\n        f()\n',
     "not a specific einloop error"),
    ('def test_x():\n    with pytest.raises(TEError):\n        f()\n',
     "without a literal, non-empty match="),
    ('def test_x():\n    with pytest.raises(TEError, match=""):\n        f()\n',
     "without a literal, non-empty match="),
    ('def test_x():\n    f()\n', "no pytest.raises"),
    ('@pytest.mark.xfail(reason="r")\ndef test_x():\n'
     '    with pytest.raises(TEError, match="a"):\n        f()\n', "strict=True"),
])
def test_checker_rejects(bad, complaint):
    assert check_source(GOOD) == []
    problems = check_source(bad)
    assert any(complaint in p for p in problems), problems
