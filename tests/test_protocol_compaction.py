"""Log compaction seen through the protocol (issue 11): topic configs and broker defaults
under Kafka's names, CreateTopics' existence check, keyless records refused by compacted
topics.  An in-process broker (tests/broker_fixture.py), Kafka as the spec."""

from __future__ import annotations

import pytest
from broker_fixture import (
    CREATE_TOPICS,
    INVALID_CONFIG,
    NONE,
    TOPIC_ALREADY_EXISTS,
    unique_topic,
    wait_until,
)

from pybroker.testing.client import create_topics_body
from pybroker.wire.records import build_batch

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
SET = 0
INVALID_RECORD = 87
LIST, LONG, DOUBLE = 7, 5, 6

COMPACTION_TOPIC_CONFIGS = {
    # topic config: (Kafka's default, broker synonym, type)
    "cleanup.policy": ("delete", "log.cleanup.policy", LIST),
    "delete.retention.ms": ("86400000", "log.cleaner.delete.retention.ms", LONG),
    "min.cleanable.dirty.ratio": ("0.5", "log.cleaner.min.cleanable.ratio", DOUBLE),
    "min.compaction.lag.ms": ("0", "log.cleaner.min.compaction.lag.ms", LONG),
    "max.compaction.lag.ms": (str(2**63 - 1), "log.cleaner.max.compaction.lag.ms", LONG),
}


def create(client, name, configs=None, version=5):
    body = client.request(
        CREATE_TOPICS, version, create_topics_body(name, configs=configs, timeout_ms=10000)
    )
    (r,) = body["topics"]
    return r


def describe(client, rtype, name, keys=None):
    body = client.request(
        DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}
            ],
            "include_synonyms": True,
        },
    )
    (r,) = body["results"]
    assert r["error_code"] == NONE, r
    return {c["name"]: c for c in r["configs"]}


def incremental(client, topic, name, value):
    body = client.request(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": topic,
                    "configs": [{"name": name, "config_operation": SET, "value": value}],
                }
            ],
            "validate_only": False,
        },
    )
    (r,) = body["responses"]
    return r["error_code"], r["error_message"]


def legacy_alter(client, topic, configs):
    body = client.request(
        ALTER_CONFIGS,
        2,
        {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": topic,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "validate_only": False,
        },
    )
    (r,) = body["responses"]
    return r["error_code"], r["error_message"]


# ------------------------------------------------------------------------------- configs


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact", "delete"])
def test_create_topic_with_cleanup_policy(client, policy):
    topic = unique_topic("cp")
    r = create(client, topic, {"cleanup.policy": policy})
    assert r["error_code"] == NONE, r
    got = describe(client, TOPIC_RESOURCE, topic, ["cleanup.policy"])["cleanup.policy"]
    assert (got["value"], got["config_source"]) == (policy, TOPIC_CONFIG)


def test_compaction_topic_configs_defaults_and_synonyms(client):
    topic = unique_topic("cd")
    assert create(client, topic)["error_code"] == NONE
    configs = describe(client, TOPIC_RESOURCE, topic)
    for name, (default, synonym, ctype) in COMPACTION_TOPIC_CONFIGS.items():
        c = configs[name]
        assert (c["value"], c["config_source"], c["config_type"]) == (
            default,
            DEFAULT_CONFIG,
            ctype,
        ), name
        assert [(s["name"], s["value"]) for s in c["synonyms"]] == [(synonym, default)]


def test_compaction_topic_config_overrides(client):
    topic = unique_topic("co")
    wanted = {
        "cleanup.policy": "compact",
        "delete.retention.ms": "1000",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "5",
        "max.compaction.lag.ms": "60000",
    }
    r = create(client, topic, wanted)
    assert r["error_code"] == NONE, r
    reported = {c["name"]: (c["value"], c["config_source"]) for c in r["configs"]}
    for name, value in wanted.items():
        assert reported[name] == (value, TOPIC_CONFIG)
    configs = describe(client, TOPIC_RESOURCE, topic)
    for name, value in wanted.items():
        assert (configs[name]["value"], configs[name]["config_source"]) == (value, TOPIC_CONFIG)


@pytest.mark.parametrize(
    "configs, key",
    [
        ({"cleanup.policy": "compact,keep"}, "cleanup.policy"),
        ({"cleanup.policy": "compact,,delete"}, "cleanup.policy"),
        ({"delete.retention.ms": "-1"}, "delete.retention.ms"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"min.cleanable.dirty.ratio": "dirty"}, "min.cleanable.dirty.ratio"),
        ({"min.compaction.lag.ms": "-5"}, "min.compaction.lag.ms"),
        ({"max.compaction.lag.ms": "0"}, "max.compaction.lag.ms"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "min.compaction.lag.ms"),
    ],
)
def test_bad_compaction_configs(client, configs, key):
    topic = unique_topic("bad")
    r = create(client, topic, configs)
    assert r["error_code"] == INVALID_CONFIG
    assert key in r["error_message"]
    assert create(client, topic)["error_code"] == NONE  # nothing was created
    for name, value in configs.items():
        code, message = incremental(client, topic, name, value)
        if len(configs) == 1:
            assert code == INVALID_CONFIG and key in message


def test_broker_defaults_reported_with_static_source(start_broker):
    b = start_broker(
        **{
            "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": "0.25",
            "log.cleaner.backoff.ms": "100",
        }
    )
    with b.client() as c:
        topic = unique_topic("bd")
        r = create(c, topic)
        assert r["error_code"] == NONE
        reported = {x["name"]: (x["value"], x["config_source"]) for x in r["configs"]}
        assert reported["cleanup.policy"] == ("compact", STATIC_BROKER_CONFIG)
        configs = describe(c, TOPIC_RESOURCE, topic)
        got = configs["cleanup.policy"]
        assert (got["value"], got["config_source"]) == ("compact", STATIC_BROKER_CONFIG)
        got = configs["min.cleanable.dirty.ratio"]
        assert (got["value"], got["config_source"]) == ("0.25", STATIC_BROKER_CONFIG)
        assert configs["delete.retention.ms"]["config_source"] == DEFAULT_CONFIG
        broker_cfg = describe(c, BROKER_RESOURCE, "0")
        expected = {
            "log.cleanup.policy": ("compact", STATIC_BROKER_CONFIG),
            "log.cleaner.enable": ("true", DEFAULT_CONFIG),
            "log.cleaner.threads": ("1", DEFAULT_CONFIG),
            "log.cleaner.dedupe.buffer.size": (str(128 * 1024 * 1024), DEFAULT_CONFIG),
            "log.cleaner.io.buffer.size": (str(512 * 1024), DEFAULT_CONFIG),
            "log.cleaner.backoff.ms": ("100", STATIC_BROKER_CONFIG),
            "log.cleaner.min.cleanable.ratio": ("0.25", STATIC_BROKER_CONFIG),
            "log.cleaner.delete.retention.ms": ("86400000", DEFAULT_CONFIG),
            "log.cleaner.min.compaction.lag.ms": ("0", DEFAULT_CONFIG),
            "log.cleaner.max.compaction.lag.ms": (str(2**63 - 1), DEFAULT_CONFIG),
        }
        for key, want in expected.items():
            assert (broker_cfg[key]["value"], broker_cfg[key]["config_source"]) == want, key
        # the broker's compacted default makes a compacted log
        assert wait_until(lambda: b.broker.logs.get(topic, 0)).config.compact


def test_alter_cleanup_policy_live(broker, client):
    topic = unique_topic("live")
    assert create(client, topic)["error_code"] == NONE
    log = wait_until(lambda: broker.broker.logs.get(topic, 0))  # opened on the broker's loop
    assert not log.config.compact
    assert incremental(client, topic, "cleanup.policy", "compact")[0] == NONE
    wait_until(lambda: log.config.compact and not log.config.delete)
    assert (
        describe(client, TOPIC_RESOURCE, topic, ["cleanup.policy"])["cleanup.policy"]["value"]
        == "compact"
    )
    assert legacy_alter(client, topic, {"cleanup.policy": "delete"})[0] == NONE
    wait_until(lambda: log.config.delete and not log.config.compact)
    assert incremental(client, topic, "cleanup.policy", "compact,delete")[0] == NONE
    wait_until(lambda: log.config.delete and log.config.compact)


# --------------------------------------------------------------------- CreateTopics order


@pytest.mark.parametrize("version", [2, 5, 7])
def test_create_existing_topic_answers_exists_whatever_the_configs(client, version):
    topic = unique_topic("exists")
    assert create(client, topic, {"cleanup.policy": "compact"}, version)["error_code"] == NONE
    for configs in (
        {"cleanup.policy": "compact"},
        {"no.such.config": "1"},
        {"preallocate": "true"},  # a Kafka config pybroker does not implement
        {"retention.ms": "soon"},
    ):
        r = create(client, topic, configs, version)
        assert r["error_code"] == TOPIC_ALREADY_EXISTS, (configs, r)


# --------------------------------------------------------------- keyless records refused


def produce(client, topic, records, version):
    body = client.request(
        0,
        version,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    ((p,),) = [t["partition_responses"] for t in body["responses"]]
    return p


@pytest.mark.parametrize("version", [3, 7, 8, 9])
@pytest.mark.parametrize("compression", [0, 1, 4])
def test_produce_keyless_record_to_compacted_topic(client, version, compression):
    if compression == 4 and version < 7:
        pytest.skip("zstd needs Produce v7")
    topic = unique_topic("keyless")
    assert create(client, topic, {"cleanup.policy": "compact"})["error_code"] == NONE
    records = build_batch(
        [(b"k0", b"v", []), (None, b"v", []), (b"k2", b"v", []), (None, None, [])],
        compression=compression,
    )
    p = produce(client, topic, records, version)
    assert p["error_code"] == INVALID_RECORD
    assert p["base_offset"] == -1
    if version >= 8:
        errors = [(e["batch_index"], e["batch_index_error_message"]) for e in p["record_errors"]]
        assert [i for i, _ in errors] == [1, 3]
        assert all("Compacted topic cannot accept message without key" in m for _, m in errors)
        assert "Compacted topic cannot accept message without key" in p["error_message"]
    # nothing was appended; keyed records are fine
    ok = produce(client, topic, build_batch([(b"k", b"v", [])], compression=compression), version)
    assert (ok["error_code"], ok["base_offset"]) == (NONE, 0)
    # a topic that is not compacted takes keyless records
    plain = unique_topic("plain")
    assert create(client, plain)["error_code"] == NONE
    assert produce(client, plain, records, version)["error_code"] == NONE


# ------------------------------------------------------------------- the cleaner at work


def test_broker_cleans_a_compacted_topic(start_broker):
    from pybroker.wire.record_walker import decode_records
    from pybroker.wire.records import scan_batches

    b = start_broker(**{"log.cleaner.backoff.ms": "50"})
    topic = unique_topic("clean")
    with b.client() as c:
        r = create(
            c,
            topic,
            {
                "cleanup.policy": "compact",
                "segment.bytes": "2000",
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "0",
            },
        )
        assert r["error_code"] == NONE
        latest: dict[bytes, bytes | None] = {}
        for i in range(300):
            key = b"k%02d" % (i % 20)
            value = None if i % 50 == 49 else b"v%d" % i
            latest[key] = value
            p = produce(c, topic, build_batch([(key, value, [])]), 8)
            assert p["error_code"] == NONE
        plog = b.broker.logs.get(topic, 0)
        wait_until(lambda: b.broker.cleaner.last_clean.get((topic, 0)) is not None)

        def consumed():
            out, offset = [], 0
            while True:
                p = c.fetch(topic, 0, offset)
                data = p["records"] or b""
                if not data:
                    return out
                for h in scan_batches(data):
                    batch = bytes(data[h.position : h.position + h.size])
                    out.extend((x.offset, x.key, x.value) for x in decode_records(batch))
                    offset = h.next_offset

        # everything below the active segment is clean: only the latest of each key is left
        # there, and a consumer from offset 0 reads in offset order across the gaps
        def clean_enough():
            got = consumed()
            first_active = plog.segments[-1].base_offset
            keys = [k for o, k, _ in got if o < first_active]
            return got if len(keys) == len(set(keys)) and len(got) < 300 else None

        got = wait_until(clean_enough)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        final = {}
        for _, k, v in got:
            final[k] = v
        assert {k: v for k, v in final.items() if v is not None} == {
            k: v for k, v in latest.items() if v is not None
        }
        assert (b.log_dir / "cleaner-offset-checkpoint").exists()
