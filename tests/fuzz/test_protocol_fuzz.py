"""The protocol fuzzer (tests/fuzz): its frame layouts, its reproducibility, and a short seeded
run against a real broker process (scripts/fuzz-protocol runs a long one)."""

from __future__ import annotations

import collections
import os
import random

import pytest

from pybroker import handlers  # noqa: F401  (registers every handler)
from pybroker.registry import HANDLERS
from pybroker.wire import codec

from .frames import BATCH_KINDS, MUTATIONS, Pool, encode, layout, make_frame, valid_body
from .runner import LogWatch, Options, own_stall_ms, own_stalls, run, traceback_signature

PAIRS = [
    (k, v) for k, r in sorted(HANDLERS.items()) for v in range(r.min_version, r.max_version + 1)
]
SEED = int(os.environ.get("PYBROKER_FUZZ_SEED", "20261122"))
FRAMES = int(os.environ.get("PYBROKER_FUZZ_FRAMES", "8000"))


def test_layout_walks_every_valid_request_of_every_served_version():
    """The fuzzer's own reading of the schemas (the field boundaries it mutates at) agrees
    with the codec for every (api, version) the broker serves."""
    for api_key, version in PAIRS:
        for s in range(4):
            body = valid_body(api_key, version, random.Random(s), Pool())
            frame = encode(api_key, version, 7, body)
            spans = layout(frame)
            assert spans and spans[0].start == 0
            ends = [sp.end for sp in spans]
            assert max(ends) == len(frame), (api_key, version)
            header, decoded = codec.decode_request(frame)
            assert (header["request_api_key"], header["request_api_version"]) == (api_key, version)


def test_frames_are_a_function_of_seed_and_index():
    a = [make_frame(5, i, PAIRS, Pool()).data for i in range(300)]
    b = [make_frame(5, i, PAIRS, Pool()).data for i in range(300)]
    assert a == b
    assert a != [make_frame(6, i, PAIRS, Pool()).data for i in range(300)]


def test_every_mutation_kind_and_every_api_version_is_generated():
    kinds = {k: w for k, w in MUTATIONS.items() if k != "bomb"}  # bombs take a second each
    seen = collections.Counter()
    pairs = set()
    for i in range(3 * len(PAIRS) * 10):
        f = make_frame(11, i, PAIRS, Pool(), kinds)
        seen[f.mutation] += 1
        pairs.add((f.api_key, f.version))
    assert set(kinds) <= set(seen), seen
    assert pairs == set(PAIRS)
    assert all(seen[k] > 0 for k in BATCH_KINDS if k in kinds)


def test_log_watch_finds_whole_tracebacks_and_stalls(tmp_path):
    log = tmp_path / "broker.stderr"
    log.write_text("started\n")
    w = LogWatch(log)
    with open(log, "a") as f:
        f.write(
            "2026-11-22 10:00:00,000 WARNING pybroker.loop_monitor: event loop stalled 150 ms\n"
        )
        f.write("2026-11-22 10:00:00,001 ERROR pybroker.connection: unexpected error\n")
        f.write("Traceback (most recent call last):\n")
        f.write('  File "/x/pybroker/handlers/list_offsets.py", line 5, in _lookup\n')
    tbs, stalls, errors = w.poll()
    assert (tbs, len(stalls), errors) == ([], 1, 1)  # the exception line is not there yet
    with open(log, "a") as f:
        f.write("    raise InvalidRecordError(code)\n")
        f.write("pybroker.wire.records.InvalidRecordError: CORRUPT_MESSAGE\n")
    tbs, stalls, errors = w.poll()
    assert len(tbs) == 1 and not stalls
    assert traceback_signature(tbs[0]) == (
        "pybroker.wire.records.InvalidRecordError: CORRUPT_MESSAGE "
        "at pybroker/handlers/list_offsets.py, line 5, in _lookup"
    )


# pytest's 300 s limit is the run's deadline: 15 s on a quiet machine, 180 s at load 10-15
# on 2 cores (the broker's loop and the fuzzer get a fraction of a core), over 300 s at ~20
@pytest.mark.timeout(1200)
def test_short_fuzz_run(tmp_path):
    """A few thousand mutated frames over every served API and version: no crash, no
    traceback, no stall over 100 ms, bounded RSS, the canary intact before and after a
    restart.  A failure prints the seed, the frame and its hex (replay with
    scripts/fuzz-protocol or tests.fuzz.runner --replay)."""
    report = run(Options(frames=FRAMES, seed=SEED, workers=4, workdir=tmp_path))
    print(report.render())
    assert report.frames > 0.9 * FRAMES
    assert not report.findings, report.render()


def test_a_stall_the_machine_caused_is_told_from_the_brokers_own():
    """The monitor's figures (loop_monitor.py): the lateness less the time the loop thread
    waited for a CPU is the broker's own part; past 100 ms it is a stall to attribute."""
    busy = "W pybroker.loop_monitor: event loop stalled 320 ms (loop thread on CPU 300 ms, waiting for a CPU 15 ms)"
    held = "W pybroker.loop_monitor: event loop stalled 900 ms (loop thread on CPU 12 ms, waiting for a CPU 850 ms)"
    blocked = "W pybroker.loop_monitor: event loop stalled 400 ms (loop thread on CPU 3 ms, waiting for a CPU 0 ms)"
    busy_loaded = "W pybroker.loop_monitor: event loop stalled 3100 ms (loop thread on CPU 301 ms, waiting for a CPU 2790 ms)"
    bare = "W pybroker.loop_monitor: event loop stalled 150 ms"  # no schedstat: all of it
    assert [own_stall_ms(x) for x in (busy, held, blocked, busy_loaded, bare)] == [
        305,
        50,
        400,
        310,
        150,
    ]
    assert own_stalls([busy, held, blocked, busy_loaded, bare]) == [
        busy,
        blocked,
        busy_loaded,
        bare,
    ]


@pytest.mark.timeout(1200)
def test_a_frame_that_stalls_the_loop_is_found_and_named(tmp_path):
    """A broker whose DescribeCluster handler keeps the loop busy for 300 ms of CPU
    (tests/fuzz/stalling_broker.py), fuzzed with DescribeCluster and DescribeConfigs frames:
    the stall is a finding and its reproducer a DescribeCluster frame.  What keeps a loaded
    machine's stalls out (the loop's time waiting for a CPU, the repeated replays) must not
    hide a real one, loaded or not."""
    report = run(
        Options(
            frames=16,
            seed=SEED,
            workers=2,
            workdir=tmp_path,
            apis=frozenset({32, 60}),
            mutations=("valid",),
            broker_module=("tests.fuzz.stalling_broker", "60", "300"),
        )
    )
    print(report.render())
    stalls = [f for f in report.findings.values() if f.kind == "stall"]
    assert stalls, report.render()
    assert all(f.frame is not None and f.frame.api_key == 60 for f in stalls), report.render()
    assert {f.kind for f in report.findings.values()} == {"stall"}, report.render()


def test_log_watch_takes_a_chained_traceback_as_one(tmp_path):
    log = tmp_path / "broker.stderr"
    log.write_text("")
    w = LogWatch(log)
    log.write_text(
        "x ERROR pybroker.connection: unexpected error\n"
        "Traceback (most recent call last):\n"
        '  File "/x/pybroker/wire/records.py", line 1, in decompress\n'
        "EOFError: short\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/x/pybroker/wire/records.py", line 2, in decompress\n'
        "pybroker.wire.records.InvalidRecordError: cannot decompress\n"
        "x INFO next line\n"
    )
    (tb,), _, errors = w.poll()
    assert errors == 1
    assert traceback_signature(tb).startswith("pybroker.wire.records.InvalidRecordError")
