"""The README's promises, checked, so that it cannot drift from the code.

Every fenced code block of README.md is run or checked here.  An HTML comment right before a
block (invisible on GitHub) says how, with directives joined by ``;``:

    <!-- test: file attention.py -->        save the block as that file; later blocks import it
    <!-- test: continues -->                run in the folder of the block before it, after it:
                                            its files, tuning logs and libraries are there
    <!-- test: shrink 1024 -> 64 | 200 -> 4 -->
                                            run with these replacements (sizes, trial counts);
                                            each must occur in the block, as a whole token
    <!-- test: skip REASON -->              not run; REASON says what tests it instead

A python block runs as pasted: as a script of its own, in a fresh interpreter, in a fresh folder
(which ``continues`` shares: files, never Python names).  A bash block is checked, not run:
``make T`` needs the Makefile's target T, ``pip install einloop[X]`` the extra X of
pyproject.toml, any other ``PROG SUB --opt`` that ``PROG SUB --help`` lists ``--opt``.  The
``einloop ...`` commands quoted in the prose name subcommands and options the CLI has.
"""
import ast
import contextlib
import io
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field

import pytest

import einloop
from einloop.cli import make_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EINLOOP_ROOT = str(pathlib.Path(einloop.__file__).resolve().parents[1])
DIRECTIVES = ("file", "continues", "shrink", "skip")
HAVE_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))


@dataclass
class Block:
    lang: str
    code: str
    line: int                       # of the opening fence, 1-based
    section: str
    directives: dict = field(default_factory=dict)

    @property
    def where(self):
        return f"README.md:{self.line} ({self.section})"

    def shrunk(self) -> str:
        """The code with the ``shrink`` replacements made (each must match)."""
        code = self.code
        for old, new in self.directives.get("shrink", ()):
            token = (r"(?<![\w.])" if re.match(r"\w", old) else "") + re.escape(old) \
                + (r"(?![\w.])" if re.search(r"\w$", old) else "")
            assert re.search(token, code), f"{self.where}: shrink {old!r}: not in the block"
            code = re.sub(token, new, code)
        return code


def _directives(comment: str, where: str) -> dict:
    found = {}
    for part in (p.strip() for p in comment.split(";") if p.strip()):
        word, _, rest = part.partition(" ")
        rest = " ".join(rest.split())
        assert word in DIRECTIVES, f"{where}: unknown directive {word!r} (known: {DIRECTIVES})"
        if word == "shrink":
            pairs = [p.split(" -> ") for p in rest.split(" | ")]
            assert all(len(p) == 2 for p in pairs), f"{where}: write shrink OLD -> NEW | ..."
            found[word] = [(old.strip(), new.strip()) for old, new in pairs]
        elif word == "continues":
            found[word] = True
        else:
            assert rest, f"{where}: {word} needs an argument"
            found[word] = rest
    return found


def readme_blocks(text=None) -> list:
    """The fenced blocks of the README, each with its section and its directives."""
    text = README.read_text() if text is None else text
    blocks, end = [], 0
    for m in re.finditer(r"^```(\w*)\n(.*?)^```\s*$", text, re.M | re.S):
        line = text.count("\n", 0, m.start()) + 1
        heading = re.findall(r"^#+ (.+)$", text[:m.start()], re.M)
        section = heading[-1] if heading else "top"
        before = text[end:m.start()]
        comment = re.search(r"<!--\s*test:(.*?)-->\s*\Z", before, re.S)
        where = f"README.md:{line}"
        blocks.append(Block(m.group(1), m.group(2), line, section,
                            _directives(comment.group(1), where) if comment else {}))
        end = m.end()
    return blocks


def python_groups() -> list:
    """The python blocks to run, grouped: a block that ``continues`` joins the group before."""
    groups = []
    for b in readme_blocks():
        if b.lang != "python" or "skip" in b.directives:
            continue
        if b.directives.get("continues"):
            assert groups, f"{b.where}: continues, but no python block comes before it"
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


def _id(group):
    return f"line{group[0].line}-" + re.sub(r"\W+", "_", group[0].section).strip("_").lower()


def test_every_block_is_run_checked_or_says_why_not():
    blocks = readme_blocks()
    assert len(blocks) >= 8
    for b in blocks:
        assert b.lang in ("python", "bash") or "skip" in b.directives, \
            f"{b.where}: a {b.lang or 'plain'} block needs a language this test knows " \
            "(python, bash) or <!-- test: skip REASON -->"
        if "file" in b.directives:
            assert b.lang == "python" and "/" not in b.directives["file"], b.where


@pytest.mark.parametrize("group", python_groups(), ids=_id)
def test_python_blocks_run_as_pasted(group, tmp_path):
    env = {**os.environ, "PYTHONPATH": EINLOOP_ROOT}
    if any("export_library" in b.code for b in group) and not HAVE_CC:
        pytest.skip("exporting a library needs a C compiler (cc, gcc, clang)")
    for b in group:
        code = b.shrunk()
        if "file" in b.directives:
            (tmp_path / b.directives["file"]).write_text(code)
            continue
        script = tmp_path / f"readme_line{b.line}.py"
        script.write_text(code)
        run = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{b.where} failed as run:\n{code}\n--- stdout\n" \
                                    f"{run.stdout[-3000:]}\n--- stderr\n{run.stderr[-3000:]}"


def _bash_commands():
    for b in readme_blocks():
        if b.lang != "bash" or "skip" in b.directives:
            continue
        for n, raw in enumerate(b.code.splitlines()):
            line = raw.split("#", 1)[0].strip()
            if line:
                yield pytest.param(line, id=f"line{b.line + 1 + n}")


@pytest.mark.parametrize("command", list(_bash_commands()))
def test_bash_commands_name_what_exists(command):
    words = shlex.split(command)
    if words[0] == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
        assert set(words[1:]) <= set(targets), f"{command}: the Makefile has {targets}"
        return
    if words[:2] == ["pip", "install"]:
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "optional-dependencies"]
        for w in words[2:]:
            name, _, extra = w.partition("[")
            assert name == "einloop" and extra.rstrip("]") in extras, f"{command}: {extras}"
        return
    program = shutil.which(words[0], path=os.path.dirname(sys.executable)) \
        or shutil.which(words[0])
    assert program, f"{command}: {words[0]} is not installed"
    sub = [w for w in words[1:2] if not w.startswith("-") and "://" not in w]
    run = subprocess.run([program, *sub, "--help"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{command}: {run.stderr}"
    for option in (w for w in words if w.startswith("--")):
        assert option in run.stdout, f"{command}: {' '.join([words[0], *sub])} has no {option}"


def _help(argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        make_parser().parse_args(argv)
    return out.getvalue()


def test_the_einloop_commands_in_the_prose_exist():
    quoted = [" ".join(m.split()) for m in re.findall(r"`(einloop [^`]+)`", README.read_text())]
    assert len(quoted) >= 5
    commands = _help(["--help"])
    for text in quoted:
        words = text.replace("[", " ").replace("]", " ").split()
        assert re.search(rf"\b{words[1]}\b", commands), f"`{text}`: no command {words[1]}"
        usage = _help([words[1], "--help"])
        for option in (w for w in words if w.startswith("-")):
            assert re.search(rf"(?<![\w-]){re.escape(option)}\b", usage), \
                f"`{text}`: einloop {words[1]} has no option {option}"


def test_the_shrink_markers_and_the_convention_are_checked():
    """The conventions bite: a shrink that no longer matches, an unknown directive."""
    (block,) = readme_blocks("<!-- test: shrink 1024 -> 64 -->\n```python\nn = 10240\n```\n")
    with pytest.raises(AssertionError, match="shrink '1024': not in the block"):
        block.shrunk()
    with pytest.raises(AssertionError, match="unknown directive 'skipp'"):
        readme_blocks("<!-- test: skipp -->\n```python\nx = 1\n```\n")
    (block,) = readme_blocks("<!-- test: continues; shrink (8) -> (2) | 200 -> 4 -->\n"
                             "```python\nf(8)\nrun(n=200, m=2000)\n```\n")
    assert block.shrunk() == "f(2)\nrun(n=4, m=2000)\n" and block.directives["continues"]


def test_the_python_version_is_the_same_everywhere_and_the_sources_parse_with_it():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = tuple(int(x) for x in re.fullmatch(r">=\s*(\d+)\.(\d+)", declared).groups())
    claims = re.findall(r"Python ≥ (\d+)\.(\d+)", README.read_text())
    assert claims and {tuple(map(int, c)) for c in claims} == {minimum}, (declared, claims)
    assert sys.version_info[:2] >= minimum
    for path in sorted((ROOT / "einloop").rglob("*.py")):
        text = path.read_text()
        ast.parse(text, str(path), feature_version=minimum)     # no newer syntax
        for pattern, since in NEWER_STDLIB.items():
            if re.search(pattern, text):
                assert minimum >= since, f"{path} uses {pattern}, new in Python {since}"


#: uses of the standard library newer than some Python 3 a README might claim (regular
#: expressions), and the version that brought them
NEWER_STDLIB = {r"\bStrEnum\b": (3, 11), r"\btomllib\b": (3, 11), r"\bExceptionGroup\b": (3, 11),
                r"\.add_note\(": (3, 11), r"\bTaskGroup\b": (3, 11), r"\bfile_digest\(": (3, 11),
                r"\bbatched\(": (3, 12), r"@override\b|typing\.override": (3, 12)}
