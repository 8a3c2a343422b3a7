"""Run Apache Kafka's Java tools (kafka-tools 3.9.x from Maven Central) against a broker.

    cp = java.classpath()                   # runs scripts/fetch-java-deps once (cached)
    r = java.run_main("org.apache.kafka.tools.TopicCommand",
                      ["--bootstrap-server", broker.bootstrap, "--list"], timeout=60)
    r.returncode, r.stdout, r.stderr, r.timed_out
    p = java.start_main("org.apache.kafka.tools.VerifiableConsumer", [...], workdir=tmp_path)
    p.wait(timeout=60) / p.stop()           # background process (own process group)

The jars live under .cache/java/ (git-ignored); scripts/fetch-java-deps resolves them with
Maven and prints the classpath file. PYBROKER_JAVA_CLASSPATH overrides the classpath (a
':'-joined string, or a path to a file holding one). Tools log WARN and above to stderr through
java/log4j/tools.properties (reload4j is the binding kafka-tools 3.9 depends on).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: scripts/, java/, .cache/
FETCH_SCRIPT = ROOT / "scripts" / "fetch-java-deps"
CLASSPATH_FILE = ROOT / ".cache" / "java" / "classpath.txt"
APPS_CLASSPATH_FILE = ROOT / ".cache" / "java" / "apps-classpath.txt"
APPS_SRC = ROOT / "java" / "apps" / "src"
CLIENTS4_SRC = ROOT / "java" / "clients4" / "src"
KAFKA4_SRC = ROOT / "java" / "kafka4" / "src"
CLASSES_CACHE = ROOT / ".cache" / "java" / "classes"  # compile_app's classes, by source + jars
COMPILED_MARK = ".compiled"
KAFKA4_BROKER_LOG4J2 = ROOT / "java" / "log4j" / "kafka4-broker.properties"
KAFKA4_TOOLS_LOG4J2 = ROOT / "java" / "log4j" / "kafka4-tools.properties"
VERSION_FILE = ROOT / ".cache" / "java" / "kafka-version.txt"
TOOLS_LOG4J = ROOT / "java" / "log4j" / "tools.properties"
BROKER_LOG4J = ROOT / "java" / "log4j" / "broker.properties"
DEFAULT_HEAP = "256m"

# Main classes (Apache Kafka 3.9: the CLI tools live in org.apache.kafka.tools).
CLIENT_COMPATIBILITY_TEST = "org.apache.kafka.tools.ClientCompatibilityTest"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END_LATENCY = "org.apache.kafka.tools.EndToEndLatency"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
KAFKA_SERVER = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


class JavaDepsError(RuntimeError):
    pass


@contextlib.contextmanager
def deps_or_fail() -> Iterator[None]:
    """Around getting Kafka's jars (classpath, compile_app): a missing one fails the test with
    what to run, never skips it."""
    try:
        yield
    except JavaDepsError as e:
        import pytest

        pytest.fail(f"{e}\n(run scripts/fetch-java-deps)", pytrace=False)


def java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def java_available() -> bool:
    return java_executable() is not None


@lru_cache(maxsize=1)
def classpath() -> str:
    """The ':'-joined classpath of the Kafka jars; fetches them (once) if needed."""
    override = os.environ.get("PYBROKER_JAVA_CLASSPATH")
    if override:
        p = Path(override)
        return p.read_text().strip() if p.is_file() else override
    proc = subprocess.run(
        ["bash", str(FETCH_SCRIPT)], capture_output=True, text=True, timeout=900, cwd=ROOT
    )
    if proc.returncode != 0 or not CLASSPATH_FILE.is_file():
        raise JavaDepsError(
            f"scripts/fetch-java-deps failed (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}{proc.stdout[-2000:]}"
        )
    return _fetched_classpath(CLASSPATH_FILE, "classpath")


def _fetched_classpath(path: Path, what: str, *, check_jars: bool = True) -> str:
    """A classpath file scripts/fetch-java-deps wrote; JavaDepsError if it is missing or (with
    ``check_jars``) names a jar that is not there."""
    if not path.is_file():
        raise JavaDepsError(f"{path} missing (run scripts/fetch-java-deps)")
    cp = path.read_text().strip()
    missing = [j for j in cp.split(":") if check_jars and not Path(j).exists()]
    if missing:
        raise JavaDepsError(f"{what} lists missing jars (rerun with --force): {missing[:3]}")
    return cp


@lru_cache(maxsize=1)
def apps_classpath() -> str:
    """classpath() plus Kafka's applications of java/apps/pom.xml (kafka-streams with
    rocksdbjni, connect-file), fetched by the same script."""
    classpath()
    if os.environ.get("PYBROKER_JAVA_CLASSPATH"):
        return classpath()
    return _fetched_classpath(APPS_CLASSPATH_FILE, "apps classpath")


def clients4_classpath() -> str:
    """kafka-clients 4.x (java/clients4/pom.xml), fetched by scripts/fetch-java-deps."""
    classpath()
    path = ROOT / ".cache" / "java" / "clients4-classpath.txt"
    return _fetched_classpath(path, "clients4 classpath", check_jars=False)


def kafka4_classpath() -> str:
    """Apache Kafka 4.4 (java/kafka4/pom.xml: broker, tools, kafka-clients 4.4.0), fetched by
    scripts/fetch-java-deps."""
    classpath()
    return _fetched_classpath(ROOT / ".cache" / "java" / "kafka4-classpath.txt", "kafka4 classpath")


def compile_app(
    source: str,
    out_dir: Path | str,
    timeout: float = 180.0,
    *,
    clients4: bool = False,
    kafka4: bool = False,
) -> str:
    """javac java/apps/src/<source> against apps_classpath() (with ``clients4``:
    java/clients4/src/<source> against clients4_classpath(); with ``kafka4``:
    java/kafka4/src/<source> against kafka4_classpath()) into out_dir; returns the classpath
    to run it with (the classes first).  The classes are kept under .cache/java/classes/,
    keyed by the source's bytes and the classpath: the same source against the same jars is
    compiled once, not by every test that runs it."""
    javac = shutil.which("javac")
    if javac is None:
        raise JavaDepsError("javac not found (a JDK 17 is expected)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if kafka4:
        cp, src = kafka4_classpath(), KAFKA4_SRC / source
    else:
        cp = clients4_classpath() if clients4 else apps_classpath()
        src = (CLIENTS4_SRC if clients4 else APPS_SRC) / source
    key = hashlib.sha256(src.read_bytes() + b"\0" + cp.encode()).hexdigest()[:20]
    cached = CLASSES_CACHE / f"{src.stem}-{key}"
    if (cached / COMPILED_MARK).exists():
        return f"{cached}:{cp}"
    _javac(javac, src, cp, out_dir, timeout)
    staging = None
    try:  # keep a copy; a concurrent run that kept one first wins
        CLASSES_CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=CLASSES_CACHE, prefix=f".{src.stem}-"))
        shutil.copytree(out_dir, staging, dirs_exist_ok=True)
        (staging / COMPILED_MARK).touch()
        os.rename(staging, cached)
    except OSError:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return f"{out_dir}:{cp}"


def _javac(javac: str, src: Path, cp: str, out_dir: Path, timeout: float) -> None:
    proc = subprocess.run(
        [javac, "-nowarn", "-d", str(out_dir), "-cp", cp, str(src)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise JavaDepsError(f"javac {src.name} failed:\n{proc.stderr[-4000:]}")


def kafka_version() -> str:
    classpath()
    return VERSION_FILE.read_text().strip() if VERSION_FILE.exists() else "unknown"


def kafka4_version() -> str:
    """The Apache Kafka 4.x version java/kafka4/pom.xml pins."""
    pom = (ROOT / "java" / "kafka4" / "pom.xml").read_text()
    m = re.search(r"<kafka4.version>(.*?)</kafka4.version>", pom)
    return m.group(1) if m else "unknown"


def java_command(
    main_class: str,
    args: list[str],
    *,
    heap: str = DEFAULT_HEAP,
    log4j: Path | str | None = TOOLS_LOG4J,
    jvm_args: list[str] | None = None,
    fast_start: bool = True,
    cp: str | None = None,
) -> list[str]:
    """The java command line. fast_start picks a small-heap, quick-to-start JVM (serial GC, C1
    only) for short-lived tools; pass False for long runs (a benchmark broker) and give the GC
    flags in jvm_args."""
    java = java_executable()
    if java is None:
        raise JavaDepsError("java not found")
    cmd = [java, f"-Xmx{heap}"]
    if fast_start:
        cmd += ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    cmd += ["-Djava.awt.headless=true"]
    if log4j is not None:
        cmd.append(f"-Dlog4j.configuration=file:{log4j}")
    cmd += list(jvm_args or [])
    cmd += ["-cp", cp or classpath(), main_class, *[str(a) for a in args]]
    return cmd


@dataclass
class JavaResult:
    cmd: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self, max_chars: int = 6000) -> str:
        """The tool's outcome for an assertion message (main class, exit code, output tails)."""
        main = next((a for a in self.cmd if "." in a and a[0].isalpha() and "/" not in a), "?")
        state = "timed out" if self.timed_out else f"exit {self.returncode}"
        return (
            f"{main} {state} after {self.elapsed:.1f}s\n"
            f"--- stdout ---\n{self.stdout[-max_chars:]}\n"
            f"--- stderr ---\n{self.stderr[-max_chars:]}"
        )

    def json_lines(self) -> list[dict]:
        """stdout lines that parse as JSON objects (VerifiableProducer/Consumer events)."""
        return json_objects(self.stdout)


def json_objects(text: str) -> list[dict]:
    """The lines of ``text`` that parse as JSON objects."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def kill_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


def run_main(
    main_class: str,
    args: list[str],
    *,
    timeout: float = 120.0,
    heap: str = DEFAULT_HEAP,
    log4j: Path | str | None = TOOLS_LOG4J,
    jvm_args: list[str] | None = None,
    input: str | None = None,
    cwd: Path | str | None = None,
    cp: str | None = None,
) -> JavaResult:
    """Run a main class to completion; on timeout its process group is killed (no raise)."""
    cmd = java_command(main_class, args, heap=heap, log4j=log4j, jvm_args=jvm_args, cp=cp)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc, signal.SIGKILL)
        out, err = proc.communicate()
    return JavaResult(cmd, proc.returncode, out, err, time.monotonic() - start, timed_out)


@dataclass
class JavaProcess:
    """A main class running in the background; stdout/stderr go to files in `workdir`."""

    cmd: list[str]
    proc: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    started: float = field(default_factory=time.monotonic)

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> JavaResult:
        """Wait for exit; on timeout kill the group and mark the result timed out."""
        timed_out = False
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(self.proc, signal.SIGKILL)
            self.proc.wait(timeout=10)
        return self.result(timed_out)

    def stop(self, timeout: float = 15.0) -> JavaResult:
        """SIGTERM (the tools' shutdown hooks close their clients), then SIGKILL."""
        kill_group(self.proc, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.proc, signal.SIGKILL)
            self.proc.wait(timeout=10)
        return self.result(False)

    def result(self, timed_out: bool = False) -> JavaResult:
        return JavaResult(
            self.cmd,
            self.proc.returncode,
            self.stdout_path.read_text(errors="replace"),
            self.stderr_path.read_text(errors="replace"),
            time.monotonic() - self.started,
            timed_out,
        )

    def stdout_text(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def events(self) -> list[dict]:
        """The JSON objects the tool printed so far, a line each (a line still being written
        is left out)."""
        return json_objects(self.stdout_text())


def start_main(
    main_class: str,
    args: list[str],
    *,
    workdir: Path | str,
    name: str | None = None,
    heap: str = DEFAULT_HEAP,
    log4j: Path | str | None = TOOLS_LOG4J,
    jvm_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    fast_start: bool = True,
    cp: str | None = None,
) -> JavaProcess:
    """Start a main class in the background; cp defaults to classpath() (apps_classpath() or
    compile_app()'s answer for Kafka Streams / Connect connectors)."""
    cmd = java_command(
        main_class, args, heap=heap, log4j=log4j, jvm_args=jvm_args, fast_start=fast_start, cp=cp
    )
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    name = name or main_class.rsplit(".", 1)[-1]
    out_path, err_path = workdir / f"{name}.out", workdir / f"{name}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=workdir,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
    return JavaProcess(cmd, proc, out_path, err_path)


# -- reading the broker's side ----------------------------------------------------------------

_REFUSED = re.compile(
    r"closing (?P<peer>\S+): (?:api (?P<key>\d+) v(?P<ver>\d+) (?P<why>not served|not supported)"
    r"|cannot decode api (?P<dkey>\d+) v(?P<dver>\d+): (?P<err>.*))"
)


def refused_requests(broker_output: str) -> list[tuple[int, int, str]]:
    """(api_key, version, reason) for every request the broker closed a connection over."""
    found = []
    for m in _REFUSED.finditer(broker_output):
        if m.group("key") is not None:
            found.append((int(m.group("key")), int(m.group("ver")), m.group("why")))
        else:
            found.append((int(m.group("dkey")), int(m.group("dver")), f"decode: {m.group('err')}"))
    return sorted(set(found))


_JAVA_EXC = re.compile(
    r"((?:org\.apache\.kafka|java\.util\.concurrent|java\.lang)[\w.$]*(?:Exception|Error))"
    r"(?::\s*([^\n]*))?"
)


def java_errors(text: str, limit: int = 8) -> list[str]:
    """Distinct 'ExceptionClass: message' lines from a tool's output, first seen first."""
    seen: dict[str, None] = {}
    for m in _JAVA_EXC.finditer(text):
        line = m.group(1) + (f": {m.group(2).strip()}" if m.group(2) else "")
        seen.setdefault(line[:300], None)
        if len(seen) >= limit:
            break
    return list(seen)
