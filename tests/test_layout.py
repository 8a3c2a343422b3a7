"""One harness (issue 26): no module edits ``sys.path``, and the harness (pybroker/testing) and
the bench import the product and pybroker.testing only, never a test suite.  Below, issue 26's
other structure points: a module size cap (data tables allowed by name), typed broker
services, one varint reader, no import in a function hiding a circle, no private name
imported from another module.

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
SUITE_MODULES = {"broker_fixture", "scram_clients", "small_disk", "fake_internal_log", "power_loss"}
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


# -- issue 26's structure points, kept from regressing ----------------------------------------

MODULE_LINES_MAX = 700
# modules allowed over the cap: generated data tables (only assignments, no code)
DATA_TABLES = {"pybroker/kafka_broker_configs.py"}


def product_modules() -> list[Path]:
    return [p for p in python_files() if p.is_relative_to(ROOT / "pybroker")]


def test_no_module_over_the_size_cap():
    too_big = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in product_modules()
        if (n := len(p.read_text().splitlines())) > MODULE_LINES_MAX
        and str(p.relative_to(ROOT)) not in DATA_TABLES
    ]
    assert not too_big, f"modules over {MODULE_LINES_MAX} lines (split them):\n" + "\n".join(
        too_big
    )


def test_the_large_modules_allowed_are_pure_data():
    for rel in DATA_TABLES:
        tree = ast.parse((ROOT / rel).read_text())
        code = [
            f"{rel}:{n.lineno}: {type(n).__name__}"
            for n in tree.body
            if not isinstance(n, ast.Import | ast.ImportFrom | ast.Assign | ast.AnnAssign)
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        ]
        code += [
            f"{rel}:{n.lineno}: {type(n).__name__}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Lambda | ast.FunctionDef | ast.ClassDef)
        ]
        assert not code, "a data table holds code:\n" + "\n".join(code)


def test_the_broker_services_are_typed():
    """A parameter or attribute holding the broker's services (``services``, ``broker``,
    ``ctx``) is typed (BrokerServices, RequestContext, a Protocol of what it uses), never
    ``Any`` / ``object`` or left bare."""
    names = {"services", "broker", "ctx"}
    untyped = []
    for p in product_modules():
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                args = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
                untyped += [
                    f"{p.relative_to(ROOT)}:{n.lineno}: {n.name}({a.arg})"
                    for a in args
                    if a.arg in names
                    and (a.annotation is None or ast.unparse(a.annotation) in ("Any", "object"))
                ]
            elif isinstance(n, ast.AnnAssign):
                target = ast.unparse(n.target).split(".")[-1]
                if target in names and ast.unparse(n.annotation) in ("Any", "object"):
                    untyped.append(f"{p.relative_to(ROOT)}:{n.lineno}: {target}")
    assert not untyped, "\n".join(untyped)


# a varint decoder: 7-bit groups accumulated by shifting
VARINT_DECODE = re.compile(r"&\s*0x7[fF]\)?\s*<<")


def test_one_varint_reader():
    """The varints are read by wire/primitives.py's uvarint_at/varint_at only (the record
    walker and the cleaner's scans inline the one- and two-byte cases, then call them)."""
    readers = {
        str(p.relative_to(ROOT))
        for p in python_files()
        if p.is_relative_to(ROOT / "pybroker") or p.is_relative_to(ROOT / "bench")
        if VARINT_DECODE.search(p.read_text())
    }
    assert readers == {"pybroker/wire/primitives.py"}, readers


def test_one_free_port_helper():
    """Ports for test servers come from pybroker/testing/procutil.py's free_port/free_ports
    only: a bare bind to port 0 can hand the same port to two calls in a row (2 in 20,000
    pairs here), and test_tls' two listeners then collided (ListenerBindError, session 13)."""
    definers = {
        str(p.relative_to(ROOT))
        for p in python_files()
        if re.search(r"^def free_ports?\(", p.read_text(), re.M)
    }
    assert definers == {"pybroker/testing/procutil.py"}, definers


def path_tests_in_choices(path: Path) -> list[int]:
    """Lines of ``a if <path with an f-string>.is_dir()/.exists() else b``: a choice made from
    whether a file is there, such as which log dir holds a replica."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.IfExp):
            for call in ast.walk(node.test):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr in {"is_dir", "exists", "is_file"}
                    and any(isinstance(n, ast.JoinedStr) for n in ast.walk(call.func.value))
                ):
                    out.append(node.lineno)
    return out


def test_no_test_reads_a_replica_dir_from_an_absence():
    """A test does not decide where a broker put something from a file's absence
    (``"d1" if (dir / f"{topic}-0").is_dir() else "d2"``): metadata names a partition's
    replicas and leader before the brokers made their logs, and a log not made yet is not one
    in the other dir (test_log_dirs' ZooKeeper cluster test failed so in a fresh-clone CI
    run, session 14).  Cluster.wait_replicas_on_disk waits for the logs and says where each
    is."""
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in python_files()
        if p.relative_to(ROOT).parts[0] in SUITES | {"bench"}
        or p.is_relative_to(ROOT / "pybroker" / "testing")
        for n in path_tests_in_choices(p)
    ]
    assert not offenders, "a choice from a path's absence (wait for it):\n" + "\n".join(offenders)


# imports inside a function: only lazy loads of optional parts, each named here
LAZY_IMPORTS = {
    ("pybroker/__main__.py", "pybroker.node.supervisor"),  # a multi-core node only
    ("pybroker/builder.py", "pybroker.coord.metadata.zk"),  # kazoo only with ZooKeeper
}


def test_no_import_inside_a_function_hides_a_circle():
    found = set()
    for p in product_modules():
        for f in ast.walk(ast.parse(p.read_text())):
            if not isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for n in ast.walk(f):
                if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("pybroker"):
                    found.add((str(p.relative_to(ROOT)), n.module))
                elif isinstance(n, ast.Import):
                    found |= {
                        (str(p.relative_to(ROOT)), a.name)
                        for a in n.names
                        if a.name.startswith("pybroker")
                    }
    # the harness (pybroker/testing) loads test-only clients where used: not pybroker's own
    found = {f for f in found if not f[0].startswith("pybroker/testing/")}
    assert found <= LAZY_IMPORTS, sorted(found - LAZY_IMPORTS)


def test_no_private_name_imported_from_another_module():
    """``from m import _x`` reaches into another module's internals; a private *module* of a
    package (handlers/_authz.py ...) is fine."""
    offenders = []
    for p in product_modules() + [p for p in python_files() if p.is_relative_to(ROOT / "bench")]:
        for n in ast.walk(ast.parse(p.read_text())):
            if not isinstance(n, ast.ImportFrom) or not n.module:
                continue
            for a in n.names:
                if not a.name.startswith("_") or a.name.startswith("__"):
                    continue
                as_module = ROOT.joinpath(*n.module.split("."), a.name)
                if as_module.with_suffix(".py").is_file() or as_module.is_dir():
                    continue
                offenders.append(f"{p.relative_to(ROOT)}:{n.lineno}: {n.module}.{a.name}")
    assert not offenders, "\n".join(offenders)


def test_the_readme_layout_names_every_package():
    """README's Layout section names each package (``pybroker/x`` or, under a named parent,
    ``x/y``), so a reader finds every folder there."""
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    packages = sorted(
        str(p.parent.relative_to(ROOT))
        for top in ("pybroker", "bench")
        for p in (ROOT / top).rglob("__init__.py")
    )
    missing = [
        pkg
        for pkg in packages
        if f"`{pkg}`" not in layout
        and f"`{pkg.split('/', 1)[-1]}`" not in layout
        and f"`{pkg}/" not in layout
        and f"`{pkg.split('/', 1)[-1]}/" not in layout
        and f"({pkg.split('/', 1)[-1]}/" not in layout
    ]
    assert packages and not missing, f"README's Layout does not name: {missing}"
