"""Client quotas: Kafka's rate and throttle arithmetic, the precedence of the eight quota
levels and entity names (pure), and over the wire against an in-process broker:
AlterClientQuotas / DescribeClientQuotas semantics (match types, strict, Kafka's errors, the
stored znodes) and throttled Produce and Fetch answers with the connection muted."""

from __future__ import annotations

import json
import time

import pytest
from broker_fixture import (
    FETCH,
    INVALID_REQUEST,
    NONE,
    UNSUPPORTED_VERSION,
    batch,
    fetch_body,
    produce_body,
    unique_topic,
)

from pybroker.quotas.entities import (
    desanitize,
    entity,
    entity_of_path,
    path_of,
    precedence,
    resolve,
    sanitize,
)
from pybroker.quotas.manager import QuotaManager
from pybroker.quotas.rate import WindowedRate, throttle_time_ms

DESCRIBE, ALTER = 48, 49
EXACT, DEFAULT, ANY = 0, 1, 2

# -- the rate ---------------------------------------------------------------------------------


def test_kafkas_quota_violation_example_gives_kafkas_throttle_time():
    """ClientQuotaManagerTest.testQuotaViolation: 500 B/s; 400 B each second for 10 s is
    within it; 2300 B half a second later make (4000 + 2300) / 10.5 s = 600 B/s, and the
    throttle time is (600 - 500) / 500 * 10.5 s = 2100 ms."""
    rate, now = WindowedRate(samples=11, window_ms=1000), 0
    for _ in range(10):
        rate.record(400, now)
        assert throttle_time_ms(rate, 500, now) == 0
        now += 1000
    now += 500
    rate.record(2300, now)
    assert rate.measure(now) == pytest.approx(600)
    assert throttle_time_ms(rate, 500, now) == 2100


def test_a_fresh_rate_counts_samples_minus_one_full_windows():
    rate = WindowedRate(samples=11, window_ms=1000)
    rate.record(5000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == 500
    rate2 = WindowedRate(samples=2, window_ms=1000)
    rate2.record(5000, 0)
    assert rate2.measure(250) == 5000 / 1.25


def test_samples_older_than_the_whole_window_are_forgotten():
    rate = WindowedRate(samples=2, window_ms=1000)
    rate.record(10_000, 0)
    assert throttle_time_ms(rate, 1000, 0) == 9000  # (10000 - 1000) / 1000 * 1 s
    assert rate.total(1999) == 10_000
    assert rate.total(2000) == 0
    assert throttle_time_ms(rate, 1000, 2000) == 0


def test_request_percentage_throttle_is_capped_at_one_window():
    quotas = {entity(client_id="c"): {"request_percentage": 1.0, "producer_byte_rate": 1.0}}
    m = QuotaManager(lambda: quotas, lambda: 0, samples=11, window_ms=1000)
    assert m.record("request_percentage", "u", "c", 500.0) == 1000
    assert m.record("producer_byte_rate", "u", "c", 500.0) > 1000


# -- entities and precedence ------------------------------------------------------------------


def test_names_are_sanitized_as_kafkas_sanitizer():
    assert sanitize("CN=Some characters !@#$%&*()_-+=';:,/~") == (
        "CN%3DSome%20characters%20%21%40%23%24%25%26%2A%28%29_-%2B%3D%27%3B%3A%2C%2F%7E"
    )
    assert desanitize(sanitize("a b*c/é")) == "a b*c/é"
    assert path_of(entity(user="<default>")) == "/config/users/%3Cdefault%3E"
    assert path_of(entity(user=None)) == "/config/users/<default>"
    assert path_of(entity(user="alice", client_id=None)) == (
        "/config/users/alice/clients/<default>"
    )
    assert path_of(entity(client_id="app 1")) == "/config/clients/app%201"
    assert path_of(entity(ip="10.0.0.1")) == "/config/ips/10.0.0.1"
    for e in (entity(user="a/b", client_id="c"), entity(client_id=None), entity(ip=None)):
        assert entity_of_path(path_of(e)) == e


def test_the_eight_levels_in_kafkas_order():
    paths = [path_of(e) for e, _ in precedence("alice", "app")]
    assert paths == [
        "/config/users/alice/clients/app",
        "/config/users/alice/clients/<default>",
        "/config/users/alice",
        "/config/users/<default>/clients/app",
        "/config/users/<default>/clients/<default>",
        "/config/users/<default>",
        "/config/clients/app",
        "/config/clients/<default>",
    ]


@pytest.mark.parametrize("level", range(8))
def test_each_level_wins_over_the_levels_after_it(level):
    levels = precedence("alice", "app")
    quotas = {e: {"producer_byte_rate": float(i)} for i, (e, _) in enumerate(levels) if i >= level}
    quotas[entity(user="bob")] = {"producer_byte_rate": 99.0}  # someone else's
    assert resolve(quotas, "producer_byte_rate", "alice", "app") == (float(level), levels[level][1])
    assert resolve(quotas, "consumer_byte_rate", "alice", "app") is None


def test_sensors_are_shared_by_the_entity_tags():
    """A user quota is one sensor for all the user's client ids; a default client-id quota
    gives each client id its own sensor."""
    quotas = {
        entity(user="alice"): {"producer_byte_rate": 1000.0},
        entity(client_id=None): {"producer_byte_rate": 1000.0},
    }
    m = QuotaManager(lambda: quotas, lambda: 0, samples=2, window_ms=1000)
    assert m.record("producer_byte_rate", "alice", "a", 1000) == 0
    assert m.record("producer_byte_rate", "alice", "b", 1000) > 0  # alice's shared sensor
    assert m.record("producer_byte_rate", "bob", "a", 1000) == 0
    assert m.record("producer_byte_rate", "bob", "b", 1000) == 0  # its own client-id sensor


# -- over the wire ----------------------------------------------------------------------------


def alter(client, entries, validate_only=False, version=1):
    body = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in ent],
                "ops": [
                    {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                    for k, v in ops.items()
                ],
            }
            for ent, ops in entries
        ],
        "validate_only": validate_only,
    }
    return [
        (e["error_code"], e["error_message"])
        for e in client.request(ALTER, version, body)["entries"]
    ]


def describe(client, components, strict=False, version=1):
    body = client.request(
        DESCRIBE,
        version,
        {
            "components": [
                {"entity_type": t, "match_type": mt, "match": m} for t, mt, m in components
            ],
            "strict": strict,
        },
    )
    if body["error_code"] != NONE:
        return body["error_code"], body["error_message"]
    return {
        tuple(sorted((e["entity_type"], e["entity_name"]) for e in entry["entity"])): {
            v["key"]: v["value"] for v in entry["values"]
        }
        for entry in body["entries"]
    }


def stored(broker, path):
    data, _ = broker.run(broker.broker.store.get(path))
    return json.loads(data)


U, C = "user", "client-id"


@pytest.fixture
def broker(start_broker):
    """A broker of the test's own: quotas are cluster-wide state."""
    return start_broker()


def test_alter_and_describe_with_every_match_type(broker, client):
    assert (
        alter(
            client,
            [
                ([(C, "perf")], {"producer_byte_rate": 1048576, "request_percentage": 50}),
                ([(C, None)], {"consumer_byte_rate": 2000}),
                ([(U, "alice")], {"producer_byte_rate": 3000}),
                ([(U, "alice"), (C, "perf")], {"consumer_byte_rate": 4000}),
                ([(U, None), (C, None)], {"producer_byte_rate": 5000}),
                ([("ip", "10.0.0.1")], {"connection_creation_rate": 7}),
            ],
        )
        == [(NONE, None)] * 6
    )
    assert stored(broker, "/config/clients/perf") == {
        "version": 1,
        "config": {"producer_byte_rate": "1048576", "request_percentage": "50.0"},
    }
    assert stored(broker, "/config/users/<default>/clients/<default>")["config"] == {
        "producer_byte_rate": "5000"
    }
    assert stored(broker, "/config/ips/10.0.0.1")["config"] == {"connection_creation_rate": "7"}
    perf = ((C, "perf"),)
    both = ((C, "perf"), (U, "alice"))
    assert describe(client, [(C, EXACT, "perf")], strict=True) == {
        perf: {"producer_byte_rate": 1048576.0, "request_percentage": 50.0}
    }
    assert describe(client, [(C, EXACT, "perf")]) == {
        perf: {"producer_byte_rate": 1048576.0, "request_percentage": 50.0},
        both: {"consumer_byte_rate": 4000.0},
    }
    assert describe(client, [(C, DEFAULT, None)], strict=True) == {
        ((C, None),): {"consumer_byte_rate": 2000.0}
    }
    assert set(describe(client, [(C, ANY, None)], strict=True)) == {perf, ((C, None),)}
    assert set(describe(client, [(U, ANY, None), (C, ANY, None)], strict=True)) == {
        both,
        ((C, None), (U, None)),
    }
    assert set(describe(client, [(U, EXACT, "alice")])) == {((U, "alice"),), both}
    assert set(describe(client, [])) == {
        perf, ((C, None),), ((U, "alice"),), both, ((C, None), (U, None)), (("ip", "10.0.0.1"),)
    }  # fmt: skip
    assert describe(client, [], strict=True) == {}
    assert describe(client, [("ip", ANY, None)]) == {
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 7.0}
    }
    # v0 answers the same
    assert describe(client, [(C, EXACT, "perf")], strict=True, version=0) == {
        perf: {"producer_byte_rate": 1048576.0, "request_percentage": 50.0}
    }
    # removing the last quota removes the entity from the answers
    assert alter(client, [([(C, None)], {"consumer_byte_rate": None})]) == [(NONE, None)]
    assert describe(client, [(C, DEFAULT, None)], strict=True) == {}


def test_alter_refuses_what_kafka_refuses(broker, client):
    cases = [
        ([(C, "x")], {"connection_creation_rate": 5}, "Invalid configuration key connection_creation_rate"),
        ([("ip", "1.2.3.4")], {"producer_byte_rate": 5}, "Invalid configuration key producer_byte_rate"),
        ([(C, "x")], {"producer_byte_rate": 1.5}, "Configuration producer_byte_rate must be a LONG value"),
        ([(U, "u"), ("ip", "1.2.3.4")], {"producer_byte_rate": 5}, "IP entity should not be combined"),
        ([("ip", "not-an-ip")], {"connection_creation_rate": 5}, "not-an-ip is not a valid IP"),
        ([("group", "g")], {"producer_byte_rate": 5}, "Unhandled client quota entity type: group"),
        ([(C, "")], {"producer_byte_rate": 5}, "Empty client-id not supported"),
        ([], {"producer_byte_rate": 5}, "Invalid empty client quota entity"),
    ]  # fmt: skip
    results = alter(client, [(ent, ops) for ent, ops, _ in cases])
    for (code, message), (_, _, expected) in zip(results, cases, strict=True):
        assert code == INVALID_REQUEST and expected in message, (message, expected)
    # validate_only checks and writes nothing
    assert alter(client, [([(C, "v")], {"producer_byte_rate": 10})], validate_only=True) == [
        (NONE, None)
    ]
    assert describe(client, [(C, EXACT, "v")]) == {}
    assert describe(client, [(C, EXACT, "a"), (C, EXACT, "b")])[0] == INVALID_REQUEST
    assert describe(client, [("group", ANY, None)])[0] == UNSUPPORTED_VERSION
    assert describe(client, [(U, ANY, None), ("ip", ANY, None)])[0] == INVALID_REQUEST


def test_quotas_share_a_users_node_with_its_scram_credentials(broker, client):
    """Kafka keeps both in /config/users/<user>: altering one keeps the other."""
    node = "/config/users/carol"
    doc = {
        "version": 1,
        "config": {"SCRAM-SHA-256": "salt=xx,stored_key=yy,server_key=zz,iterations=4096"},
    }
    broker.run(broker.broker.store.create(node, json.dumps(doc).encode(), makepath=True))
    assert alter(client, [([(U, "carol")], {"producer_byte_rate": 100})]) == [(NONE, None)]
    assert stored(broker, node)["config"] == {**doc["config"], "producer_byte_rate": "100"}
    assert describe(client, [(U, EXACT, "carol")]) == {
        ((U, "carol"),): {"producer_byte_rate": 100.0}
    }
    assert alter(client, [([(U, "carol")], {"producer_byte_rate": None})]) == [(NONE, None)]
    assert stored(broker, node)["config"] == doc["config"]
    assert describe(client, [(U, EXACT, "carol")]) == {}


def test_an_alteration_writes_kafkas_config_change_notification(broker, client):
    """As kafka-configs on ZooKeeper: /config/changes/config_change_<seq> names the entity."""
    store = broker.broker.store
    before = set(broker.run(store.get_children("/config/changes")))
    assert alter(client, [([(C, "notify-me")], {"producer_byte_rate": 100})]) == [(NONE, None)]
    new = sorted(set(broker.run(store.get_children("/config/changes"))) - before)
    docs = [json.loads(broker.run(store.get(f"/config/changes/{n}"))[0]) for n in new]
    assert {"version": 2, "entity_path": "clients/notify-me"} in docs


def test_a_throttled_produce_is_answered_at_once_and_the_connection_muted(broker, client):
    """producer_byte_rate=10000 on this client id, quota.window.num 11: 150 KB produced at
    once is measured over 10 s, 15000 B/s, so the answer says (15000 - 10000) / 10000 * 10 s
    (about 5 s); the next request on the connection is read only after that time."""
    topic = unique_topic()
    client.create_topic(topic)
    assert alter(client, [([(C, client.client_id)], {"producer_byte_rate": 10000})]) == [
        (NONE, None)
    ]
    body = client.request(0, 8, produce_body(topic, 0, batch([b"x" * 150_000])))
    throttle = body["throttle_time_ms"]
    assert body["responses"][0]["partition_responses"][0]["error_code"] == NONE
    assert 4000 <= throttle <= 6000, throttle
    sent = time.monotonic()
    client.request(18, 0, {})
    assert time.monotonic() - sent >= throttle / 1000 - 0.05
    # another client id is not charged
    other = broker.client()
    other.client_id = "someone-else"
    with other:
        assert (
            other.request(0, 8, produce_body(topic, 0, batch([b"y" * 150_000])))["throttle_time_ms"]
            == 0
        )


def test_a_throttled_fetch_answers_nothing_and_the_data_comes_later(broker, client):
    topic = unique_topic()
    client.create_topic(topic)
    client.produce(topic, 0, batch([b"z" * 30_000]))
    client.produce(topic, 0, batch([b"w" * 30_000]))
    assert alter(client, [([(C, client.client_id)], {"consumer_byte_rate": 4000})]) == [
        (NONE, None)
    ]
    # the quota bounds a fetch: 4000 * (11 - 1) = 40000 bytes, so one batch per fetch
    first = client.request(FETCH, 11, fetch_body([(topic, 0, 0, 10_000_000)], max_bytes=50_000_000))
    assert first["throttle_time_ms"] == 0
    (records,) = [p["records"] for t in first["responses"] for p in t["partitions"]]
    assert 30_000 < len(records) < 40_000
    second = client.request(FETCH, 11, fetch_body([(topic, 0, 1, 10_000_000)]))
    assert second["throttle_time_ms"] > 0 and second["responses"] == []
    # throttled answers (each muting the connection) until the rate, measured over at least
    # ten one-second windows, has room for the batch; then it is read
    for _ in range(10):
        third = client.request(FETCH, 11, fetch_body([(topic, 0, 1, 10_000_000)]))
        if third["throttle_time_ms"] == 0:
            break
        assert third["responses"] == []
    (records,) = [p["records"] for t in third["responses"] for p in t["partitions"]]
    assert 30_000 < len(records) < 40_000


def test_timed_counts_only_the_handlers_own_steps():
    """request_percentage charges the time a handler runs on the loop, not its waits."""
    import asyncio

    from pybroker.quotas.client import Timed

    now = [0.0]

    async def handler(wake: asyncio.Future) -> str:
        now[0] += 5  # work
        await wake  # waiting (for data, a replica, the store)
        now[0] += 7  # more work
        return "answer"

    async def main() -> tuple[str, float]:
        wake = asyncio.get_running_loop().create_future()
        timed = Timed(handler(wake), clock=lambda: now[0])
        task = asyncio.ensure_future(_run(timed))
        await asyncio.sleep(0)
        now[0] += 100  # the loop serves others meanwhile
        wake.set_result(None)
        return await task, timed.seconds

    async def _run(timed: Timed) -> str:
        return await timed

    assert asyncio.run(main()) == ("answer", 12)


def test_a_request_quota_throttles_requests_and_spares_api_versions(broker, client):
    assert alter(client, [([(C, client.client_id)], {"request_percentage": 0.000001})]) == [
        (NONE, None)
    ]
    body = client.request(3, 9, {"topics": [], "allow_auto_topic_creation": False,
                                 "include_cluster_authorized_operations": False,
                                 "include_topic_authorized_operations": False})  # fmt: skip
    # any handler time is far above the quota: Kafka caps the throttle at one window
    assert body["throttle_time_ms"] == 1000
    assert (
        client.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})[
            "throttle_time_ms"
        ]
        == 0
    )


def test_connection_creation_rate_closes_connections_over_the_ips_quota(broker, client):
    """connection_creation_rate=1 on 127.0.0.1 (quota.window.num 11: 10 connections fit the
    first window's measure): past them, a new connection is closed without an answer."""
    assert alter(client, [([("ip", "127.0.0.1")], {"connection_creation_rate": 1})]) == [
        (NONE, None)
    ]
    # the quota reaches the accept loop through the store's watch
    from broker_fixture import wait_until

    wait_until(lambda: broker.broker.quota_store.quotas)
    answered, closed = 0, 0
    for _ in range(15):
        with broker.client() as c:
            try:
                c.request(18, 0, {})
                answered += 1
            except (OSError, AssertionError):  # closed (reset, EOF) or timed out
                closed += 1
    assert answered == 10 and closed == 5, (answered, closed)


def test_quotas_need_alter_configs_and_describe_configs_on_the_cluster(start_broker):
    """With an authorizer and no ACL for the anonymous principal: Kafka's
    CLUSTER_AUTHORIZATION_FAILED on every entry (alter) and on the answer (describe)."""
    b = start_broker(
        **{
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
        }
    )
    with b.client() as c:
        assert alter(c, [([(C, "x")], {"producer_byte_rate": 5}), ([(U, None)], {})]) == [
            (31, None),
            (31, None),
        ]
        assert describe(c, [])[0] == 31
