"""Several log dirs (JBOD): placement, start-up, moving a replica (future log), dir failure.

log/manager.py and log/mover.py on real files in tmp dirs; a failed dir is a log dir replaced
by a regular file, which fails every open below it whoever the user is (root included)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from pybroker.clock import ManualClock
from pybroker.log.checkpoints import read_checkpoint
from pybroker.log.manager import (
    DuplicateLogError,
    LogDirNotFoundError,
    LogManager,
    OfflineLogDirError,
)
from pybroker.log.mover import LogDirMover
from pybroker.log.partition_log import LogConfig, parse_future_dir
from pybroker.wire.record_walker import decode_records
from pybroker.wire.records import build_batch, parse_batches, scan_batches


def append(log, n=2, value=b"v"):
    buf = bytearray(build_batch([(None, value, [])] * n, timestamp=1))
    info = log.append(buf, parse_batches(buf))
    log.high_watermark = log.log_end_offset
    return info


def values(log):
    """Every record value of the log, in offset order."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        got = log.read(offset, 1 << 20)
        got.file.seek(got.position)
        data = got.file.read(got.size)
        for h in scan_batches(data):
            out += [r.value for r in decode_records(data[h.position : h.position + h.size])]
            offset = h.next_offset
    return out


def fail(path):
    """Replace a log dir by a regular file: every later open under it fails (ENOTDIR)."""
    shutil.rmtree(path)
    path.write_text("not a directory")


@pytest.fixture
def dirs(tmp_path):
    return [tmp_path / "d1", tmp_path / "d2", tmp_path / "d3"]


def manager(dirs, **cfg):
    mgr = LogManager(dirs, LogConfig(**cfg), ManualClock())
    mgr.load_all()
    return mgr


# -- placement ----------------------------------------------------------------------------------


def test_new_partitions_go_to_the_dir_with_the_fewest_logs(dirs):
    mgr = manager(dirs)
    for p in range(6):
        mgr.get_or_create("a", p)
    assert [sorted(os.listdir(d)) for d in dirs] == [
        ["a-0", "a-3", *CHECKPOINTS],
        ["a-1", "a-4", *CHECKPOINTS],
        ["a-2", "a-5", *CHECKPOINTS],
    ]
    # a dir emptied by deletions gets the next ones
    mgr.delete("a", 1)
    mgr.delete("a", 4)
    assert mgr.dir_of(mgr.get_or_create("b", 0)) == dirs[1]


def test_placement_counts_follow_creation_deletion_moves_and_failures(dirs):
    """next_log_dir reads per-dir counts kept by the log tables (not a walk over every log,
    which made creating n partitions O(n^2)): they always equal a recount."""
    mgr = manager(dirs, segment_bytes=300)

    def recount():
        want: dict = {}
        for table in (mgr.logs, mgr.future_logs):
            for lg in table.values():
                want[mgr.dir_of(lg)] = want.get(mgr.dir_of(lg), 0) + 1
        got = {
            d: mgr.logs.per_dir.get(d, 0) + mgr.future_logs.per_dir.get(d, 0)
            for d in set(mgr.logs.per_dir) | set(mgr.future_logs.per_dir)
        }
        assert {d: n for d, n in got.items() if n} == want

    for p in range(7):
        mgr.get_or_create("a", p)
    recount()
    log = mgr.get_or_create("a", 0)
    append(log)
    fut = mgr.create_future("a", 0, dirs[2])
    recount()
    mover = LogDirMover(mgr)
    while fut.log_end_offset < log.log_end_offset:
        mover._copy_chunk(log, fut)
    mgr.replace_current_with_future("a", 0)
    assert mgr.dir_of(log) == dirs[2]
    recount()
    mgr.delete("a", 3)
    mgr.delete("a", 3)
    recount()
    fail(dirs[1])
    mgr.fail_dir(dirs[1])
    recount()
    assert mgr.dir_of(mgr.get_or_create("b", 0)) == dirs[0]  # d1: 2 logs, d3: 3 (a-0 moved)
    recount()


CHECKPOINTS = [
    "log-start-offset-checkpoint",
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
]


def test_a_preferred_dir_named_before_the_replica_existed_is_used_once(dirs):
    mgr = manager(dirs)
    mgr.preferred_dirs[("a", 0)] = dirs[2]
    assert mgr.dir_of(mgr.get_or_create("a", 0)) == dirs[2]
    assert ("a", 0) not in mgr.preferred_dirs


def test_resolve_dir_compares_absolute_paths(dirs, tmp_path, monkeypatch):
    mgr = manager(dirs)
    monkeypatch.chdir(tmp_path)
    assert mgr.resolve_dir("d2") == dirs[1]
    with pytest.raises(LogDirNotFoundError):
        mgr.resolve_dir(tmp_path / "elsewhere")


# -- start-up ------------------------------------------------------------------------------------


def test_every_dir_is_loaded_with_its_own_checkpoints(dirs):
    mgr = manager(dirs)
    for p in range(3):
        append(mgr.get_or_create("a", p), n=p + 1)
    mgr.close()
    for d, p in zip(dirs, range(3), strict=True):
        assert read_checkpoint(d / "recovery-point-offset-checkpoint") == {("a", p): p + 1}
    again = manager(dirs)
    assert again.had_clean_shutdown
    assert {k: lg.log_end_offset for k, lg in again.logs.items()} == {
        ("a", 0): 1,
        ("a", 1): 2,
        ("a", 2): 3,
    }
    assert [again.dir_of(again.get("a", p)) for p in range(3)] == dirs


def test_a_partition_in_two_dirs_stops_the_start(dirs):
    mgr = manager(dirs)
    append(mgr.get_or_create("a", 0))
    mgr.close()
    shutil.copytree(dirs[0] / "a-0", dirs[1] / "a-0")
    with pytest.raises(DuplicateLogError, match="a-0 are found in both"):
        manager(dirs)


def test_an_unusable_dir_at_start_is_offline_and_the_others_serve(dirs):
    mgr = manager(dirs[:2])
    append(mgr.get_or_create("a", 0))
    mgr.close()
    dirs[2].write_text("a file where a dir should be")
    again = manager(dirs)
    assert again.offline_dirs == {dirs[2]}
    assert again.get("a", 0).log_end_offset == 2
    assert again.dir_of(again.get_or_create("b", 0)) in dirs[:2]


def test_no_usable_dir_at_start_is_an_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OfflineLogDirError):
        manager([tmp_path / "f"])


# -- moving a replica ---------------------------------------------------------------------------


def test_a_move_copies_while_appends_go_on_then_swaps(dirs):
    mgr = manager(dirs[:2], segment_bytes=600)
    log = mgr.get_or_create("a", 0)
    assert mgr.dir_of(log) == dirs[0]
    for i in range(20):
        append(log, value=b"%d" % i)
    mover = LogDirMover(mgr, chunk_bytes=200)

    async def scenario():
        assert mover.start_move("a", 0, dirs[1])
        fut = mgr.get_future("a", 0)
        assert parse_future_dir(fut.directory.name) == ("a", 0)
        assert fut.directory.parent == dirs[1]
        for i in range(20, 40):  # the partition keeps taking appends during the copy
            append(log, value=b"%d" % i)
            await asyncio.sleep(0)
        await mover.tasks[("a", 0)]

    asyncio.run(scenario())
    assert mover.completed == 1
    assert mgr.get("a", 0) is log  # the same object, now in the other dir
    assert mgr.dir_of(log) == dirs[1] and log.directory.name == "a-0"
    assert values(log) == [b"%d" % i for i in range(40) for _ in range(2)]
    assert mgr.future_logs == {}
    append(log, value=b"after")
    assert values(log)[-1] == b"after"
    mgr.delete_pending_files(force=True)
    assert not any(n.startswith("a-0") for n in os.listdir(dirs[0]))
    mgr.close()
    again = manager(dirs[:2])
    assert again.dir_of(again.get("a", 0)) == dirs[1]
    assert values(again.get("a", 0))[-1] == b"after"


def test_moving_to_the_current_dir_is_a_no_op_and_cancels_a_move(dirs):
    mgr = manager(dirs[:2])
    append(mgr.get_or_create("a", 0))
    mover = LogDirMover(mgr)

    async def scenario():
        assert not mover.start_move("a", 0, dirs[0])
        assert mover.start_move("a", 0, dirs[1])
        assert mgr.get_future("a", 0) is not None
        assert not mover.start_move("a", 0, dirs[0])  # back home: the move is abandoned
        assert mgr.get_future("a", 0) is None

    asyncio.run(scenario())
    mgr.delete_pending_files(force=True)
    assert not any(n.endswith("-future") for n in os.listdir(dirs[1]))
    assert mgr.dir_of(mgr.get("a", 0)) == dirs[0]


def test_a_truncation_of_the_current_log_is_applied_to_the_future(dirs):
    mgr = manager(dirs[:2])
    log = mgr.get_or_create("a", 0)
    for i in range(5):
        append(log, value=b"%d" % i)
    fut = mgr.create_future("a", 0, dirs[1])
    mover = LogDirMover(mgr)
    while fut.log_end_offset < log.log_end_offset:
        mover._copy_chunk(log, fut)
    log.truncate_to(6)  # a follower truncating to its new leader
    assert fut.log_end_offset == 6
    append(log, value=b"new")
    while fut.log_end_offset < log.log_end_offset:
        mover._copy_chunk(log, fut)
    assert values(fut) == values(log)


def test_a_move_interrupted_by_a_crash_resumes_at_start(dirs):
    mgr = manager(dirs[:2], segment_bytes=300)
    log = mgr.get_or_create("a", 0)
    for i in range(30):
        append(log, value=b"%d" % i)
    fut = mgr.create_future("a", 0, dirs[1])
    mover = LogDirMover(mgr, chunk_bytes=100)
    for _ in range(3):
        mover._copy_chunk(log, fut)
    assert 0 < fut.log_end_offset < log.log_end_offset
    copied = fut.log_end_offset
    mgr.checkpoint()  # then the process dies (no close)
    again = manager(dirs[:2], segment_bytes=300)
    assert again.get_future("a", 0).log_end_offset == copied
    again_mover = LogDirMover(again)

    async def resume():
        again_mover.resume()
        await again_mover.tasks[("a", 0)]

    asyncio.run(resume())
    moved = again.get("a", 0)
    assert again.dir_of(moved) == dirs[1]
    assert values(moved) == [b"%d" % i for i in range(30) for _ in range(2)]


def test_a_future_log_without_a_current_one_is_removed_at_start(dirs):
    mgr = manager(dirs[:2])
    append(mgr.get_or_create("a", 0))
    fut = mgr.create_future("a", 0, dirs[1])
    mgr.close()
    shutil.rmtree(dirs[0] / "a-0")
    again = manager(dirs[:2])
    assert again.get_future("a", 0) is not None and again.get("a", 0) is None

    async def resume():
        LogDirMover(again).resume()

    asyncio.run(resume())
    again.delete_pending_files(force=True)
    assert again.future_logs == {} and not fut.directory.exists()
    assert not any(n.endswith("-future") for n in os.listdir(dirs[1]))


def test_a_crash_between_the_two_renames_of_the_swap_is_refused_at_start(dirs, monkeypatch):
    mgr = manager(dirs[:2])
    log = mgr.get_or_create("a", 0)
    append(log)
    fut = mgr.create_future("a", 0, dirs[1])
    LogDirMover(mgr)._copy_chunk(log, fut)

    def crash(plog):
        raise SystemExit("killed")

    monkeypatch.setattr(mgr, "_retire", crash)
    with pytest.raises(SystemExit):
        mgr.replace_current_with_future("a", 0)
    assert (dirs[0] / "a-0").is_dir() and (dirs[1] / "a-0").is_dir()
    with pytest.raises(DuplicateLogError):
        manager(dirs[:2])


# -- a failed dir ---------------------------------------------------------------------------------


def test_a_failed_dir_goes_offline_with_its_partitions_only(dirs):
    mgr = manager(dirs[:2])
    logs = [mgr.get_or_create("a", p) for p in range(4)]
    for log in logs:
        append(log)
    told = []
    mgr.dir_failure_listeners.append(lambda d, lost: told.append((d, sorted(lost))))
    fail(dirs[1])
    mgr.checkpoint()  # the next write there fails
    assert mgr.offline_dirs == {dirs[1]}
    assert told == [(dirs[1], [("a", 1), ("a", 3)])]
    assert sorted(mgr.logs) == [("a", 0), ("a", 2)]
    assert mgr.offline_partitions == {("a", 1), ("a", 3)}
    with pytest.raises(OfflineLogDirError):
        mgr.get_or_create("a", 1)  # never recreated elsewhere while this broker runs
    assert mgr.dir_of(mgr.get_or_create("b", 0)) == dirs[0]
    append(mgr.get("a", 0))  # the other dir serves on
    with pytest.raises(OfflineLogDirError):
        mgr.resolve_dir(dirs[1])
    mgr.fail_dir(dirs[1])  # once only
    assert len(told) == 1
    mgr.close()
    assert (dirs[0] / ".kafka_cleanshutdown").exists()


def test_a_failed_target_dir_abandons_the_move(dirs):
    mgr = manager(dirs[:2])
    log = mgr.get_or_create("a", 0)
    append(log)
    mgr.create_future("a", 0, dirs[1])
    fail(dirs[1])
    mgr.checkpoint()  # the periodic work's write there fails
    assert mgr.offline_dirs == {dirs[1]}
    assert mgr.future_logs == {} and log.future_copy is None
    assert mgr.get("a", 0) is log and ("a", 0) not in mgr.offline_partitions


def test_every_dir_failed_leaves_no_online_dir(dirs):
    mgr = manager(dirs[:2])
    mgr.get_or_create("a", 0)
    mgr.get_or_create("a", 1)
    fail(dirs[0])
    fail(dirs[1])
    mgr.checkpoint()
    assert mgr.online_dirs == [] and mgr.logs == {}
    with pytest.raises(OfflineLogDirError):
        mgr.get_or_create("b", 0)


def test_a_dir_that_fails_to_create_a_log_goes_offline_and_the_next_one_is_used(dirs):
    mgr = manager(dirs[:2])
    fail(dirs[0])  # not noticed yet: the first dir is still the emptiest
    plog = mgr.get_or_create("a", 0)
    assert mgr.dir_of(plog) == dirs[1] and mgr.offline_dirs == {dirs[0]}


def test_a_log_start_moved_during_a_move_is_kept_by_the_moved_log(dirs):
    mgr = manager(dirs[:2], segment_bytes=300)
    log = mgr.get_or_create("a", 0)
    for i in range(20):
        append(log, value=b"%d" % i)
    fut = mgr.create_future("a", 0, dirs[1])
    mover = LogDirMover(mgr)
    while fut.log_end_offset < log.log_end_offset:
        mover._copy_chunk(log, fut)
    mgr.delete_records(log.topic, log.partition, 11)  # DeleteRecords (or retention) meanwhile
    mgr.replace_current_with_future("a", 0)
    assert mgr.dir_of(log) == dirs[1]
    assert log.log_start_offset == 11 and log.high_watermark == 40
    assert values(log)[0] == b"5"  # offsets 10-11: the batch holding 11 starts at 10


def test_meta_properties_format_and_checks(tmp_path):
    from pybroker.log import meta_properties as mp

    assert mp.read(tmp_path) is None
    mp.check_broker_id(tmp_path, 3)  # a new dir belongs to nobody yet
    mp.write(tmp_path, 3, "abc")
    lines = (tmp_path / "meta.properties").read_text().splitlines()
    assert lines[0] == "#" and lines[2:] == ["cluster.id=abc", "version=0", "broker.id=3"]
    mp.check_broker_id(tmp_path, 3)
    mp.check_cluster_id(tmp_path, "abc")
    with pytest.raises(mp.MetaPropertiesError, match="Configured broker.id 4"):
        mp.check_broker_id(tmp_path, 4)
    with pytest.raises(mp.MetaPropertiesError, match="trying to join the wrong cluster"):
        mp.check_cluster_id(tmp_path, "xyz")
