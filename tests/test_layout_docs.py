"""README's Layout section names every package of pybroker, and no long docstring hides
what docs/internals.md should say (a module's docstring: Kafka's rule and the invariant)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# module docstrings may run longer where a byte layout is documented at the top of the module
# that owns the format (ARCHITECTURE rule 7)
MAX_DOCSTRING_LINES = 30


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Layout\n(.*?)(?=^#|\Z)", text, re.S | re.M)
    assert m, "README.md has no Layout section"
    return m.group(1)


def test_the_readme_layout_names_every_package():
    layout = _layout()
    packages = sorted(
        str(p.parent.relative_to(ROOT / "pybroker"))
        for p in (ROOT / "pybroker").rglob("__init__.py")
        if p.parent != ROOT / "pybroker"
    )
    missing = [
        p
        for p in packages
        if f"`pybroker/{p}`" not in layout
        and not (("/" in p) and f"`{p}`" in layout)  # sub-packages: `coord/txn`
    ]
    assert not missing, f"README.md's Layout does not name: {missing}"


def test_docstrings_stay_short():
    long = []
    for path in sorted((ROOT / "pybroker").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc is not None and doc.count("\n") + 1 > MAX_DOCSTRING_LINES:
                    name = getattr(node, "name", "module")
                    long.append(f"{path.relative_to(ROOT)}:{name} ({doc.count(chr(10)) + 1})")
    assert not long, "docstrings over the limit (move the detail to docs/internals.md): " + str(
        long
    )
