"""One harness (issue 26): no module edits ``sys.path``, and the harness (pybroker/testing) and
the bench import the product and pybroker.testing only, never a test suite.

A module that needs another checkout runs it in a child with PYTHONPATH (spark_it, bench's
--pythonpath); pytest finds the suites through pyproject's ``pythonpath``.  pyproject's
import-linter contracts say the same for the import graph; this test also covers code inside
strings (a child's ``-c`` program) and the suites themselves.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = {"tests", "compat_tests", "spark_it"}
# helper modules of tests/ that tests import by their bare name (pytest's rootdir-less mode)
SUITE_MODULES = {"broker_fixture", "scram_clients", "small_disk", "fake_internal_log"}
# sys.path.insert( / .append( / .extend( / sys.path[0] = / sys.path = / sys.path += ...
SYS_PATH_EDIT = re.compile(
    r"\bsys\.path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\s*\(|\[[^\]]*\]\s*=|\+?=(?!=))"
)


def python_files() -> list[Path]:
    out = []
    for d, dirs, files in os.walk(ROOT):  # symlinks (.cache) not followed
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in {"test-artifacts"}]
        out += [Path(d) / f for f in files if f.endswith(".py")]
    return sorted(out)


def python_scripts() -> list[Path]:
    """scripts/ without the .py suffix whose #! line runs Python."""
    return sorted(
        p
        for p in (ROOT / "scripts").iterdir()
        if p.is_file() and "python" in p.read_text(errors="replace").partition("\n")[0]
    )


def test_no_module_edits_sys_path():
    me = Path(__file__).resolve()
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in python_files() + python_scripts()
        if p.resolve() != me
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if SYS_PATH_EDIT.search(line)
    ]
    assert python_files() and python_scripts(), "no Python files found"
    assert not offenders, "sys.path edited (use PYTHONPATH for a child):\n" + "\n".join(offenders)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.lineno, node.module))
    return out


def test_harness_and_bench_import_no_test_suite():
    sources = [p for p in python_files() if p.is_relative_to(ROOT / "bench")] + python_scripts()
    sources += [p for p in python_files() if p.is_relative_to(ROOT / "pybroker")]
    assert any(p.is_relative_to(ROOT / "bench") for p in sources)
    offenders = []
    for p in sources:
        in_testing = p.is_relative_to(ROOT / "pybroker" / "testing")
        for line, module in imported_modules(p):
            top = module.split(".")[0]
            if top in SUITES | SUITE_MODULES:
                offenders.append(f"{p.relative_to(ROOT)}:{line}: imports {module}")
            elif p.is_relative_to(ROOT / "pybroker") and not in_testing and top == "bench":
                offenders.append(f"{p.relative_to(ROOT)}:{line}: the product imports {module}")
    assert not offenders, "\n".join(offenders)


def test_bench_is_a_package():
    assert (ROOT / "bench" / "__init__.py").is_file()
    assert (ROOT / "bench" / "workloads" / "__init__.py").is_file()


def test_the_harness_loads_without_the_test_dependencies():
    """The plugin and the harness modules it or the bench start from import no test-only
    package at import time (kafka-python, cryptography, ... are imported where used)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import pybroker.testing.pytest_plugin, pybroker.testing.cluster_harness\n"
        "import pybroker.testing.java, pybroker.testing.kafka_reference\n"
        "import pybroker.testing.debug_process, pybroker.testing.chromium\n"
        "test_only = ('kafka', 'cryptography', 'confluent_kafka', 'aiokafka', 'hypothesis')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(test_only)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
