"""The README's promises, checked: the Python version it names is the one pyproject.toml
declares and the sources need."""
import ast
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


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
