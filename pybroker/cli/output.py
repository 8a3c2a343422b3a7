"""Rendering for the admin CLI: aligned human tables, or JSON for scripts.

Every command builds one JSON-able result and a human rendering of it; ``emit`` prints the one
that ``--output`` asks for on stdout.  Progress goes to stderr, and only when stderr is a tty.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces, headers in capitals (rpk's style)."""
    cells = [[str(h).upper() for h in headers]] + [
        ["-" if v is None else str(v) for v in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def assignment_text(assignment: Iterable[dict[str, Any]]) -> str | None:
    """A member's assignment as the group tools print it: ``topic:0,1 other:2``; None when
    empty."""
    return (
        " ".join(f"{a['topic']}:{','.join(map(str, a['partitions']))}" for a in assignment) or None
    )


def section(title: str, body: str) -> str:
    return f"{title}\n{'=' * len(title)}\n{body}\n"


def emit(fmt: str, result: Any, human: Callable[[Any], str]) -> None:
    if fmt == "json":
        print(json.dumps(result, indent=2, sort_keys=False))
    else:
        text = human(result)
        if text:
            print(text.rstrip("\n"))


def json_line(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def progress(message: str) -> None:
    """A transient progress line on stderr, only when stderr is a terminal."""
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[K{message}")
        sys.stderr.flush()


def progress_done() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
