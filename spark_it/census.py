"""What Spark's Kafka clients asked the broker, from their NetworkClient DEBUG log.

    python -m spark_it.census <kafka-clients.log>

The log is written by the driver JVM when the session is built with
build_session(client_log=...) (the spark fixture always does; the path is printed in the
test summary). Reported:

- requests sent, by client kind (AdminClient / Consumer / Producer), API and version;
- responses carrying a non-zero errorCode, by API and code;
- requests cancelled because the connection closed (how a request the broker does not
  serve shows up on the client side; cancellations at JVM exit are left out), and the
  WARN/ERROR lines of kafka-clients and Spark's connector;
- APIs the broker's ApiVersions marks UNSUPPORTED among those the clients sent.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

SEND_RE = re.compile(
    r"\[(AdminClient|Consumer|Producer) clientId=[^\]]*\].*?Sending (\w+) request with header "
    r"RequestHeader\(apiKey=\w+, apiVersion=(\d+)"
)
RECV_RE = re.compile(r"Received (\w+) response from node")
ERROR_CODE_RE = re.compile(r"errorCode=(-?\d+)")
CANCEL_RE = re.compile(r"Cancelled in-flight (\w+) request")
LEVEL_RE = re.compile(r"^\S+ (WARN|ERROR) (\S+) \[[^\]]*\]: (.*)$")
API_VERSIONS_RE = re.compile(r"API versions: \((.*)\)")
UNSUPPORTED_RE = re.compile(r"(\w+)\((\d+)\): UNSUPPORTED")


# error codes seen in normal Spark runs, with why they are expected
ERROR_NAMES = {
    1: "OFFSET_OUT_OF_RANGE (expected: failOnDataLoss test reads below the log start)",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    25: "UNKNOWN_MEMBER_ID",
    27: "REBALANCE_IN_PROGRESS",
    35: "UNSUPPORTED_VERSION",
    42: "INVALID_REQUEST",
    79: "MEMBER_ID_REQUIRED (expected: first JoinGroup of every member, KIP-394)",
}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def _normalize(msg: str) -> str:
    msg = re.sub(r"clientId=[^,\]]+", "clientId=*", msg)
    msg = re.sub(r"spark-kafka-[\w-]+", "spark-kafka-*", msg)
    msg = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:*", msg)
    msg = re.sub(r"correlation id \d+", "correlation id *", msg)
    msg = re.sub(r"spark[\w-]*-[0-9a-f]{10}(-\d+)?", "<topic>", msg)
    return msg[:300]


def summarize(path: Path) -> dict:
    sent: Counter = Counter()
    errors: Counter = Counter()
    cancelled: Counter = Counter()
    problems: Counter = Counter()
    unsupported: set[str] = set()
    with open(path, errors="replace") as f:
        for line in f:
            if m := SEND_RE.search(line):
                sent[(m.group(1), m.group(2), int(m.group(3)))] += 1
            elif m := RECV_RE.search(line):
                codes = {int(c) for c in ERROR_CODE_RE.findall(line)} - {0}
                for c in codes:
                    errors[(m.group(1), c)] += 1
            if (m := CANCEL_RE.search(line)) and "[shutdown-hook" not in line:
                # (at JVM exit, closing clients cancel their own in-flight fetches: not counted)
                cancelled[m.group(1)] += 1
            if m := API_VERSIONS_RE.search(line):
                unsupported |= {_snake(n) for n, _ in UNSUPPORTED_RE.findall(m.group(1))}
            if (m := LEVEL_RE.match(line.rstrip("\n"))) and "NetworkClient" not in m.group(2):
                problems[f"{m.group(1)} {m.group(2)}: {_normalize(m.group(3))}"] += 1
    used_apis = {api for _, api, _ in sent}
    return {
        "sent": sent,
        "errors": errors,
        "cancelled": cancelled,
        "problems": problems,
        "sent_but_unsupported": sorted(used_apis & unsupported),
    }


def report_lines(path: Path) -> list[str]:
    if not path.exists():
        return [f"(no client log at {path})"]
    s = summarize(path)
    out = [f"log: {path}", "requests sent (client, API, version: count):"]
    for (client, api, ver), n in sorted(s["sent"].items()):
        out.append(f"  {client:11s} {api}({ver}): {n}")
    out.append("responses with a non-zero errorCode (API, code: count):")
    out += [
        f"  {api} errorCode={code} {ERROR_NAMES.get(code, '')}: {n}"
        for (api, code), n in sorted(s["errors"].items())
    ]
    if not s["errors"]:
        out.append("  none")
    out.append("in-flight requests cancelled by a disconnect (API: count):")
    out += [f"  {api}: {n}" for api, n in sorted(s["cancelled"].items())] or ["  none"]
    out.append(
        "sent although ApiVersions said UNSUPPORTED: "
        + (", ".join(s["sent_but_unsupported"]) or "none")
    )
    out.append("kafka-clients / connector WARN+ERROR lines (count):")
    out += [f"  {n:4d}x {msg}" for msg, n in sorted(s["problems"].items())] or ["  none"]
    return out


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m spark_it.census <kafka-clients.log>")
    print("\n".join(report_lines(Path(argv[0]))))


if __name__ == "__main__":
    main()
