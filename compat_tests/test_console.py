"""The web console (pybroker/console/, docs/console.md) in a real browser: Debian's headless
Chromium loads each page from a running broker (``metrics.listener``) holding data that
kafka-python produced and a consumer group committed, screenshots go to the artifact dir
(pybroker/testing/chromium.py), and the assertions read the rendered DOM: topic names, partition
counts, a produced record's decoded value, lag equal to what the group committed.  Plus the
hostile-string, 10,000-partition, read-only and ACL checks.

The console does not depend on the metadata backend, so these run on the embedded one.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourceType,
)
from kafka.errors import RebalanceInProgressError
from kafka.structs import OffsetAndMetadata

from compat_tests.dom import Dom
from pybroker.testing import chromium
from pybroker.testing.debug_process import BrokerProcess
from pybroker.testing.procutil import free_port

T0 = 1_700_000_000_000  # record timestamps: T0 + i seconds
HOSTILE = "<script>document.body.setAttribute('data-pwned','1')</script>"
HOSTILE_IMG = "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"


def console_broker(start_broker, **overrides):
    port = free_port()
    b = start_broker(
        **{
            "metrics.listener": f"http://127.0.0.1:{port}",
            "console.lag.sample.interval.ms": "300",
            "group.initial.rebalance.delay.ms": "0",
            **overrides,
        }
    )
    b.http = f"http://127.0.0.1:{port}"
    return b


def get(url: str, auth: tuple[str, str] | None = None, method: str = "GET"):
    """(status, headers, body text) of one plain HTTP request."""
    req = urllib.request.Request(url, method=method)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def assigned_consumer(bootstrap: str, topic: str, partitions: int, **kw) -> KafkaConsumer:
    """A kafka-python consumer in a group that has all ``partitions`` of ``topic`` assigned.
    It learns the topic's partitions before it subscribes: a group leader that joins without
    them assigns nothing (kafka-python: "No partition metadata")."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **kw)
    deadline = time.monotonic() + 60
    while not consumer.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"no metadata for {topic}"
        time.sleep(0.1)
    consumer.subscribe([topic])
    while len(consumer.assignment()) < partitions:
        assert time.monotonic() < deadline, f"assigned {consumer.assignment()}"
        consumer.poll(200)
    return consumer


def commit(consumer: KafkaConsumer, offsets: dict) -> None:
    """Commit ``offsets`` as a kafka-python user does: RebalanceInProgressError (the client
    rejoins, e.g. after a heartbeat missed on a loaded machine) means poll, then retry."""
    deadline = time.monotonic() + 60
    while True:
        try:
            consumer.commit(offsets)
            return
        except RebalanceInProgressError:
            assert time.monotonic() < deadline, "the group never settled for the commit"
            consumer.poll(200)


def page(url: str, shot: str | None = None) -> Dom:
    if shot:
        chromium.screenshot(url, shot)
    return Dom(chromium.dump_dom(url))


@pytest.mark.parametrize("backend", ["embedded"])
def test_every_page_in_chromium(start_broker):
    chromium.require()
    b = console_broker(start_broker)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics(
        [
            NewTopic("orders", 3, 1, topic_configs={"retention.ms": "86400000"}),
            NewTopic("audit", 1, 1),
        ]
    )
    admin.close()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap)
    for i in range(30):
        value = json.dumps({"order": i, "item": "book"}).encode()
        producer.send(
            "orders", key=f"k{i}".encode(), value=value, partition=i % 3, timestamp_ms=T0 + 1000 * i
        )
    producer.send("audit", value=bytes(range(8)))
    producer.flush()
    producer.close()
    committed = {0: 4, 1: 7, 2: 10}
    consumer = assigned_consumer(
        b.bootstrap,
        "orders",
        3,
        group_id="billing",
        client_id="billing-app",
        auto_offset_reset="earliest",
    )
    commit(
        consumer,
        {TopicPartition("orders", p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()},
    )
    try:
        # the overview
        dom = page(b.http + "/", "overview.png")
        assert dom.text("topic-count") == "2"
        assert dom.text("partition-count") == "4"
        assert dom.text("controller") == "0"
        assert dom.rows("brokers") == [
            {"id": "0", "host:port": b.bootstrap, "rack": "–", "role": "controller"}
        ]
        assert dom.has("urp-none") and dom.has("offline-none")

        # the topic list
        dom = page(b.http + "/topics", "topics.png")
        rows = {r["topic"]: r for r in dom.rows("topics")}
        assert set(rows) == {"orders", "audit"}
        assert rows["orders"]["partitions"] == "3"
        assert rows["orders"]["replication factor"] == "1"
        assert rows["orders"]["under-replicated"] == "0"

        # one topic: partitions, configs, the browser by offset, JSON decoding
        url = b.http + "/topics/orders?browse=1&partition=1&offset=5&limit=3&format=json"
        dom = page(url, "topic.png")
        parts = dom.rows("partitions")
        assert [
            (r["partition"], r["leader"], r["log end"], r["high watermark"]) for r in parts
        ] == [
            ("0", "0", "10", "10"),
            ("1", "0", "10", "10"),
            ("2", "0", "10", "10"),
        ]
        configs = {r["config"]: r for r in dom.rows("configs")}
        assert configs["retention.ms"]["value"] == "86400000"
        assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
        # the record count (nothing compacted, no transactions: exact) and who consumes it
        assert dom.text("record-count") == "30"
        assert dom.text("record-count-note").startswith("exact:")
        consumers = {r["group"]: r for r in dom.rows("consumers")}
        assert consumers["billing"]["committed"] == "3"
        assert consumers["billing"]["lag"] == str(sum(10 - o for o in committed.values()))
        records = dom.rows("records")
        assert [r["offset"] for r in records] == ["5", "6", "7"]
        # partition 1 holds orders 1, 4, 7, ...: offset 5 is order 16, pretty-printed JSON
        assert records[0]["key"] == "k16"
        assert json.loads(records[0]["value"]) == {"order": 16, "item": "book"}
        assert '<pre class="value">{\n  &quot;order&quot;: 16,' in get(url)[2]  # pretty
        assert records[0]["timestamp"] == "2023-11-14T22:13:36.000+00:00"

        # by time (ListOffsets semantics: the first record at or after it), and hex
        ts = T0 + 1000 * 13 + 500  # partition 1's orders 13 (offset 4) and 16 (offset 5)
        dom = page(b.http + f"/topics/orders?browse=1&partition=1&ts={ts}&limit=1&format=hex")
        (r,) = dom.rows("records")
        assert r["offset"] == "5" and r["key"] == "6b 31 36"  # "k16"
        dom = page(b.http + "/topics/audit?browse=1&partition=0&format=hex")
        assert dom.rows("records")[0]["value"] == "00 01 02 03 04 05 06 07"
        dom = page(b.http + "/topics/orders?browse=1&partition=0&ts=2099-01-01T00:00:00Z")
        assert dom.text("browse-note") == "no record at or after that time"

        # the groups
        dom = page(b.http + "/groups", "groups.png")
        (g,) = dom.rows("groups")
        assert g["group"] == "billing" and g["state"] == "Stable" and g["members"] == "1"
        assert g["total lag"] == str(sum(10 - o for o in committed.values()))

        def group_page() -> Dom:
            return page(b.http + "/groups/billing")

        deadline = time.monotonic() + 60
        while not (dom := group_page()).elements("polyline") and time.monotonic() < deadline:
            time.sleep(0.3)
        chromium.screenshot(b.http + "/groups/billing", "group.png")
        lags = {int(r["partition"]): r for r in dom.rows("offsets")}
        for p, o in committed.items():
            assert lags[p]["committed offset"] == str(o)
            assert lags[p]["log end (high watermark)"] == "10"
            assert lags[p]["lag"] == str(10 - o)
        (m,) = dom.rows("members")
        assert m["client id"] == "billing-app"
        assert m["assignment"] == "orders: 0,1,2"
        assert dom.text("group-state") == "Stable"
        assert dom.elements("polyline"), "no lag chart after 60 s of samples"
    finally:
        consumer.close()


def href(dom: Dom, ident: str) -> str:
    """The href of the link with that id (the console's links to the same page are
    query-only: ``?...``)."""
    (a,) = [a for a in dom.elements("a") if a.get("id") == ident]
    return a["href"]


def keys(dom: Dom) -> list[str]:
    return [r["key"] for r in dom.rows("records")] if dom.has("records") else []


@pytest.mark.parametrize("backend", ["embedded"])
def test_the_browser_pages_filters_and_tables_sort_in_chromium(start_broker):
    """The message browser over all partitions (merged by time) and one, its next / previous
    / newest links and key and value filters, with what it scanned; sorting and filtering the
    topic list; the auto-refresh control; the broker's configs; the ACL page without an
    authorizer."""
    chromium.require()
    b = console_broker(start_broker)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics(
        [NewTopic("orders", 3, 1), NewTopic("audit", 1, 1), NewTopic("many", 70, 1)]
    )
    admin.close()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap)
    for p in range(70):
        producer.send("many", value=b"m", partition=p, timestamp_ms=T0 + p)
    for i in range(30):  # order i in partition i % 3, at T0 + i s: time order is key order
        value = json.dumps({"order": i}).encode()
        producer.send(
            "orders", key=b"k%d" % i, value=value, partition=i % 3, timestamp_ms=T0 + 1000 * i
        )
    producer.send("audit", value=b"a").get(timeout=20)
    producer.flush()
    producer.close()
    topic = b.http + "/topics/orders"

    # all partitions, oldest first, 4 a page: orders 0-3; next: 4-7; previous: 0-3 again
    dom = page(topic + "?browse=1&limit=4", "browser-all.png")
    assert keys(dom) == ["k0", "k1", "k2", "k3"]
    assert [r["partition"] for r in dom.rows("records")] == ["0", "1", "2", "0"]
    assert dom.text("browse-scan").startswith("Scanned 12 records in 3 partitions")
    assert not dom.has("browse-prev")  # the oldest page
    second = page(topic + href(dom, "browse-next"))
    assert keys(second) == ["k4", "k5", "k6", "k7"]
    assert keys(page(topic + href(second, "browse-prev"))) == ["k0", "k1", "k2", "k3"]
    # the newest, and back from there
    dom = page(topic + "?browse=1&limit=3&start=latest")
    assert keys(dom) == ["k27", "k28", "k29"]
    assert keys(page(topic + href(dom, "browse-prev"))) == ["k24", "k25", "k26"]
    # one partition: 1 holds orders 1, 4, 7, ... at offsets 0, 1, 2, ...
    dom = page(topic + "?browse=1&partition=1&offset=2&limit=2")
    assert keys(dom) == ["k7", "k10"]
    assert dom.text("browse-scan") == (
        "Scanned 2 records from partition 1, offsets 2 to 3 (log start 0, high watermark 10)."
    )
    assert keys(page(topic + href(dom, "browse-next"))) == ["k13", "k16"]
    # filters: value contains '"order": 2' (orders 2 and 20-29), key contains "k1" (1, 10-19)
    url = topic + "?browse=1&limit=5&value=" + urllib.request.quote('"order": 2')
    dom = page(url, "browser-filter.png")
    assert keys(dom) == ["k2", "k20", "k21", "k22", "k23"]
    assert "matched the filter" in dom.text("browse-scan")
    assert keys(page(topic + href(dom, "browse-next"))) == ["k24", "k25", "k26", "k27", "k28"]
    dom = page(topic + "?browse=1&partition=1&limit=50&key=k1")
    assert keys(dom) == ["k1", "k10", "k13", "k16", "k19"]
    assert dom.text("browse-scan").startswith("Scanned 10 records from partition 1")

    # at most 64 partitions are merged, and the page says so
    dom = page(b.http + "/topics/many?browse=1&limit=100")
    assert dom.text("browse-not-merged").startswith("At most 64 partitions are merged: 6 more")
    assert [r["partition"] for r in dom.rows("records")] == [str(p) for p in range(64)]

    # the topic list sorts by a column (header links) and filters by name
    dom = page(b.http + "/topics?sort=records&dir=desc", "topics-sorted.png")
    assert [(r["topic"], r["records (local replicas)"]) for r in dom.rows("topics")] == [
        ("many", "70"),
        ("orders", "30"),
        ("audit", "1"),
    ]
    (turn,) = [a["href"] for a in dom.elements("a") if a.get("class") == "sort desc"]
    dom = page(b.http + "/topics" + turn)
    assert [r["topic"] for r in dom.rows("topics")] == ["audit", "orders", "many"]
    dom = page(b.http + "/topics?q=AUD")
    assert [r["topic"] for r in dom.rows("topics")] == ["audit"]
    assert dom.text("topics-count") == "1 of 3"

    # auto-refresh: a meta tag, and the control to change it
    dom = page(b.http + "/groups?refresh=5")
    (meta,) = [m for m in dom.elements("meta") if m.get("http-equiv") == "refresh"]
    assert meta["content"] == "5"
    assert dom.text("refresh").startswith("auto-refresh (every 5 s)")
    assert not [m for m in page(b.http + "/groups").elements("meta") if m.get("http-equiv")]
    assert get(b.http + "/groups?refresh=soon")[0] == 400

    # this broker's configs, as DescribeConfigs answers them
    dom = page(b.http + "/brokers/0?q=log.", "broker-configs.png")
    configs = {r["config"]: r for r in dom.rows("broker-configs")}
    assert configs["log.dirs"]["source"] == "STATIC_BROKER_CONFIG"
    assert configs["log.retention.hours"]["value"] == "168"
    assert configs["log.retention.hours"]["source"] == "DEFAULT_CONFIG"
    assert all("log." in name for name in configs)
    status, _, body = get(b.http + "/brokers/7")
    assert status == 404 and "each broker&#x27;s console shows that broker&#x27;s" in body
    # no authorizer: no ACLs, said so
    dom = page(b.http + "/acls")
    assert "No authorizer is configured" in dom.text("acls-disabled")


@pytest.mark.parametrize("backend", ["embedded"])
def test_a_group_lists_assigned_partitions_without_a_commit(start_broker):
    """As kafka-consumer-groups --describe: a partition assigned but never committed is
    listed with "-" for its offset and lag, and the total lag counts only the others."""
    chromium.require()
    b = console_broker(start_broker)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("orders", 3, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap)
    for i in range(30):
        producer.send("orders", value=b"v", partition=i % 3)
    producer.flush()
    producer.close()
    consumer = assigned_consumer(
        b.bootstrap, "orders", 3, group_id="reports", client_id="reports-app"
    )
    commit(consumer, {TopicPartition("orders", 0): OffsetAndMetadata(4, "", -1)})
    try:
        dom = page(b.http + "/groups/reports", "group-uncommitted.png")
        rows = {int(r["partition"]): r for r in dom.rows("offsets")}
        assert (rows[0]["committed offset"], rows[0]["lag"]) == ("4", "6")
        for p in (1, 2):
            assert (rows[p]["committed offset"], rows[p]["lag"]) == ("-", "-")
            assert rows[p]["log end (high watermark)"] == "10"
        assert {r["client id"] for r in rows.values()} == {"reports-app"}
        assert dom.text("total-lag") == "6" and dom.text("uncommitted") == "2"
        assert dom.text("uncommitted-note").startswith("2 assigned partition(s) have no")
        dom = page(b.http + "/groups/reports?sort=lag&dir=desc")
        assert [r["lag"] for r in dom.rows("offsets")] == ["6", "-", "-"]
        (g,) = page(b.http + "/groups").rows("groups")
        assert (g["total lag"], g["assigned without a commit"]) == ("6", "2")
        dom = page(b.http + "/topics/orders")
        (c,) = dom.rows("consumers")
        assert (c["group"], c["assigned"], c["committed"], c["lag"]) == ("reports", "3", "1", "6")
        assert c["without a commit"] == "2"
    finally:
        consumer.close()


@pytest.mark.parametrize("backend", ["embedded"])
def test_a_kip848_consumer_group(start_broker):
    """A group of the consumer protocol (KIP-848, librdkafka's group.protocol=consumer): its
    member and server-side assignment, offsets and lag."""
    from confluent_kafka import Consumer, Producer

    chromium.require()
    b = console_broker(start_broker, **{"num.partitions": "2"})
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        producer.produce("k848", b"v%d" % i, partition=i % 2)
    producer.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "g848",
            "group.protocol": "consumer",
            "client.id": "cid848",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(["k848"])
        got = 0
        deadline = time.monotonic() + 60
        while got < 10 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                got += 1
        assert got == 10
        consumer.commit(asynchronous=False)
        dom = page(b.http + "/groups/g848", "group-kip848.png")
        assert dom.text("group-state") == "Stable"
        (m,) = dom.rows("members")
        assert m["client id"] == "cid848" and m["assignment"] == "k848: 0,1"
        assert [(r["partition"], r["committed offset"], r["lag"]) for r in dom.rows("offsets")] == [
            ("0", "5", "0"),
            ("1", "5", "0"),
        ]
        (g,) = page(b.http + "/groups").rows("groups")
        assert (g["group"], g["protocol type"], g["members"]) == ("g848", "consumer", "1")
    finally:
        consumer.close()


@pytest.mark.parametrize("backend", ["embedded"])
def test_hostile_strings_are_shown_as_text(start_broker):
    chromium.require()
    b = console_broker(start_broker)
    producer = KafkaProducer(bootstrap_servers=b.bootstrap)
    producer.send(
        "hostile",
        key=HOSTILE_IMG.encode(),
        value=HOSTILE.encode(),
        headers=[("h<script>", HOSTILE.encode())],
    ).get(timeout=20)
    producer.close()
    group = "g" + HOSTILE
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, client_id=HOSTILE_IMG)
    consumer.commit({TopicPartition("hostile", 0): OffsetAndMetadata(0, "", -1)})
    consumer.close()
    gurl = b.http + "/groups/" + urllib.request.quote(group, safe="")
    h = urllib.request.quote(HOSTILE, safe="")
    pages = [
        (b.http + "/topics/hostile?browse=1&partition=0", "hostile-topic.png"),
        (b.http + "/groups", None),
        (gurl, "hostile-group.png"),
        (b.http + "/topics/" + h, None),
        # what a user types comes back in forms and links: escaped there too
        (b.http + f"/topics/hostile?browse=1&key={h}&value={h}&ts={h}&partition=all", None),
        (b.http + f"/topics?q={h}&sort={h}&dir={h}&page=1", None),
        (b.http + f"/groups?q=g{h}&sort=lag", None),
        (gurl + f"?q={h}&refresh=5", None),
        (b.http + f"/brokers/0?q={h}&{h}={h}", None),
        (b.http + f"/acls?q={h}", None),
        (b.http + f"/topics/hostile?browse=1&after={h}", None),  # 400
        (b.http + f"/?refresh={h}", None),  # 400
        (b.http + "/brokers/" + h, None),  # 404
    ]
    for url, shot in pages:
        status, _, body = get(url)
        assert status in (200, 400, 404), url
        assert "<script>" not in body and "<img" not in body, url
        if shot:
            chromium.screenshot(url, shot)
        dom = Dom(chromium.dump_dom(url))
        assert 'data-pwned="' not in dom.markup, url  # no script ran
        assert not dom.elements("script") and not dom.elements("img"), url
    dom = Dom(chromium.dump_dom(b.http + "/topics/hostile?browse=1&partition=0"))
    (r,) = dom.rows("records")
    assert r["value"] == HOSTILE and r["key"] == HOSTILE_IMG
    assert r["headers"] == f"h<script>: {HOSTILE}"
    dom = Dom(chromium.dump_dom(b.http + "/groups"))
    assert [g["group"] for g in dom.rows("groups")] == [group]
    dom = Dom(chromium.dump_dom(gurl))
    assert dom.text("total-lag") == "1"
    dom = Dom(chromium.dump_dom(b.http + f"/topics/hostile?browse=1&value={h}"))
    (r,) = dom.rows("records")
    assert r["value"] == HOSTILE  # the filter found it, and the form shows what was typed
    (value,) = [i for i in dom.elements("input") if i.get("name") == "value"]
    assert value["value"] == HOSTILE
    dom = Dom(chromium.dump_dom(b.http + f"/groups?q={urllib.request.quote(group)}"))
    assert [g["group"] for g in dom.rows("groups")] == [group]
    assert get(b.http + f"/topics/hostile?browse=1&before={h}")[0] == 400


@pytest.mark.parametrize("backend", ["embedded"])
def test_a_topic_of_10000_partitions(start_broker):
    chromium.require()
    b = console_broker(start_broker)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=120_000)
    admin.create_topics([NewTopic("wide", 10_000, 1)], timeout_ms=120_000)
    admin.close()
    dom = page(b.http + "/topics/wide", "wide.png")
    assert dom.text("partition-count") == "10,000"
    rows = dom.rows("partitions")
    assert len(rows) == 1000 and rows[0]["partition"] == "0" and rows[-1]["partition"] == "999"
    assert "page 1 of 10" in dom.markup
    dom = page(b.http + "/topics/wide?page=10")
    rows = dom.rows("partitions")
    assert rows[-1]["partition"] == "9999" and rows[-1]["leader"] == "0"
    dom = page(b.http + "/topics/wide?sort=partition&dir=desc")  # sorted over all, then paged
    rows = dom.rows("partitions")
    assert (rows[0]["partition"], rows[-1]["partition"]) == ("9999", "9000")
    # the browser merges at most 64 partitions at once and says so
    dom = page(b.http + "/topics/wide?browse=1")
    assert dom.text("browse-not-merged").startswith("At most 64 partitions are merged: ")
    assert dom.has("no-records")
    dom = page(b.http + "/topics")
    assert dom.rows("topics") == [
        {
            "topic": "wide",
            "partitions": "10,000",
            "replication factor": "1",
            "records (local replicas)": "0",
            "size (local replicas)": "0 B",
            "under-replicated": "0",
        }
    ]
    dom = page(b.http + "/")
    assert dom.text("partition-count") == "10,000"


@pytest.mark.parametrize("backend", ["embedded"])
def test_read_only(start_broker):
    b = console_broker(start_broker)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/", "/topics", "/topics/x", "/groups/y", "/acls", "/brokers/0"):
            status, headers, _ = get(b.http + path, method=method)
            assert status == 405, (method, path)
            assert headers["Allow"] == "GET, HEAD"
    status, headers, body = get(b.http + "/", method="HEAD")
    assert status == 200 and body == "" and headers["Content-Type"].startswith("text/html")
    assert "script-src" not in headers["Content-Security-Policy"]  # default-src 'none'
    status, headers, body = get(b.http + "/static/console.css")
    assert status == 200 and headers["Content-Type"].startswith("text/css") and "table" in body
    assert get(b.http + "/metrics")[0] == 200  # the metrics route is still there


PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


def test_with_an_authorizer_the_console_asks_who_and_shows_what_acls_allow(tmp_path):
    port = free_port()
    settings = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }
    http = free_port()
    settings.update(
        {"metrics.listener": f"http://127.0.0.1:{http}", "console.lag.sample.interval.ms": "300"}
    )
    b = BrokerProcess(tmp_path / "secured", port=port, overrides=settings)
    b.http = f"http://127.0.0.1:{http}"
    # carol has a SCRAM credential only, added before the first start (python -m pybroker
    # add-scram, as kafka-storage format --add-scram)
    overrides = [a for k, v in b.settings().items() for a in ("--override", f"{k}={v}")]
    subprocess.run(
        [sys.executable, "-m", "pybroker", "add-scram", *overrides,
         "SCRAM-SHA-256=[name=carol,password=carol-secret]"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    b.start()
    try:
        _check_acls(b, port)
    finally:
        b.stop()
        b.cleanup()
    assert not b.traceback_excerpt(), b.traceback_excerpt()


def _check_acls(b: BrokerProcess, port: int) -> None:
    sasl = {
        "bootstrap_servers": f"127.0.0.1:{port}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "admin",
        "sasl_plain_password": "admin-secret",
    }
    admin = KafkaAdminClient(**sasl)
    admin.create_topics([NewTopic("visible", 1, 1), NewTopic("secret", 1, 1)])
    for user in ("User:alice", "User:carol", "User:" + HOSTILE_IMG):
        admin.create_acls(
            [
                ACL(
                    user,
                    "*",
                    ACLOperation.DESCRIBE,
                    ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "visible"),
                )
            ]
        )
    admin.close()
    time.sleep(0.5)  # ACL change notifications reach the authorizer

    for path in ("/", "/topics", "/groups", "/topics/visible"):
        status, headers, _ = get(b.http + path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic ")
        assert get(b.http + path, ("alice", "wrong"))[0] == 401
        assert get(b.http + path, ("nobody", "alice-secret"))[0] == 401
    assert get(b.http + "/static/console.css")[0] == 200
    assert get(b.http + "/metrics")[0] == 200  # metrics stay as they were (docs/metrics.md)

    # admin (super user, PLAIN) sees everything; alice (PLAIN) and carol (SCRAM) only "visible"
    status, _, body = get(b.http + "/topics", ("admin", "admin-secret"))
    assert status == 200
    assert [r["topic"] for r in Dom(body).rows("topics")] == ["secret", "visible"]
    for who in (("alice", "alice-secret"), ("carol", "carol-secret")):
        status, _, body = get(b.http + "/topics", who)
        assert status == 200, who
        assert [r["topic"] for r in Dom(body).rows("topics")] == ["visible"]
        assert f"User:{who[0]}" in body
        status, _, body = get(b.http + "/", who)
        assert Dom(body).text("topic-count") == "1"
        assert "Counts cover only the topics you may describe" in body
        assert get(b.http + "/topics/secret", who)[0] == 403
        assert get(b.http + "/topics/no-such-topic", who)[0] == 403  # existence not revealed
        status, _, body = get(b.http + "/topics/visible?browse=1", who)
        assert status == 200 and "You may not read this topic" in body  # DESCRIBE, not READ
        assert "You may not describe this topic's configs" in body
        # ACLs and broker configs need DESCRIBE / DESCRIBE_CONFIGS on the cluster
        assert get(b.http + "/acls", who)[0] == 403
        assert get(b.http + "/brokers/0", who)[0] == 403

    # the super user sees the ACLs (names escaped) and the broker's configs
    status, _, body = get(b.http + "/acls", ("admin", "admin-secret"))
    assert status == 200 and "<img" not in body
    acls = Dom(body).rows("acls")
    assert {
        "resource type": "TOPIC",
        "resource name": "visible",
        "pattern type": "LITERAL",
        "principal": "User:alice",
        "host": "*",
        "operation": "DESCRIBE",
        "permission": "ALLOW",
    } in acls
    assert any(r["principal"] == "User:" + HOSTILE_IMG for r in acls)
    status, _, body = get(b.http + "/acls?q=carol", ("admin", "admin-secret"))
    assert [r["principal"] for r in Dom(body).rows("acls")] == ["User:carol"]
    status, _, body = get(b.http + "/brokers/0?q=authorizer", ("admin", "admin-secret"))
    (row,) = Dom(body).rows("broker-configs")
    assert row["value"] == "kafka.security.authorizer.AclAuthorizer"

    # the browser with the credentials in the URL (HTTP Basic, as a user would type them)
    chromium.require()
    url = b.http.replace("http://", "http://alice:alice-secret@") + "/topics"
    dom = Dom(chromium.dump_dom(url))
    assert [r["topic"] for r in dom.rows("topics")] == ["visible"]


def test_a_cluster_with_a_broker_down(tmp_path):
    """Three brokers on ZooKeeper: every broker's overview lists the three brokers; with one
    killed (the only replica of "single", one replica of "replicated"), another broker's
    overview lists "replicated" as under-replicated (ISR of the two others) and "single" as
    offline."""
    chromium.require()
    from pybroker.testing.cluster_harness import running_cluster

    with running_cluster(tmp_path, overrides={"replica.lag.time.max.ms": 2000}) as c:
        ports = {}
        for i, b in c.brokers.items():
            ports[i] = free_port()
            b.overrides["metrics.listener"] = f"http://127.0.0.1:{ports[i]}"
            c.restart(i)
        c.create_topic("replicated", partitions=1, rf=3)
        c.create_topic("single", partitions=1, rf=1)
        c.wait_isr_full("replicated")
        for i in c.ids:
            dom = page(f"http://127.0.0.1:{ports[i]}/")
            assert [r["id"] for r in dom.rows("brokers")] == [str(x) for x in sorted(c.ids)]
            assert dom.text("partition-count") == "2"
        victim = c.leader_of("single", 0).leader  # its only replica: "single" goes offline
        watcher = next(i for i in c.ids if i != victim)  # metadata is the same on every broker
        c.kill9(victim)
        url = f"http://127.0.0.1:{ports[watcher]}/"
        deadline = time.monotonic() + 60
        while not ((dom := page(url)).has("urp") and dom.has("offline")):
            assert time.monotonic() < deadline, "no under-replicated and offline partitions shown"
            time.sleep(0.5)
        chromium.screenshot(url, "cluster-broker-down.png")
        (urp,) = dom.rows("urp")
        assert (urp["topic"], urp["partition"]) == ("replicated", "0")
        assert sorted(urp["replicas"].split(",")) == sorted(str(i) for i in c.ids)
        assert sorted(urp["ISR"].split(",")) == sorted(str(i) for i in c.ids if i != victim)
        (off,) = dom.rows("offline")
        assert (off["topic"], off["partition"], off["replicas"]) == ("single", "0", str(victim))
        assert dom.text("urp-count") == "1" and dom.text("offline-count") == "1"
    assert not c.stop_problems, c.stop_problems
