"""bench/clients.py's ``produce_retrying``: confluent-kafka's produce that waits out a full
queue instead of raising BufferError, against a real broker."""

from __future__ import annotations

from broker_fixture import unique_topic

from bench.clients import produce_retrying


def test_a_full_producer_queue_is_waited_out_and_every_record_is_delivered(client, broker):
    from confluent_kafka import Producer

    topic = unique_topic("bench-retry")
    client.create_topic(topic, 2)
    delivered: list = []
    # a queue of 5 messages: producing 200 back to back fills it again and again
    p = Producer(
        {
            "bootstrap.servers": f"{broker.host}:{broker.port}",
            "queue.buffering.max.messages": 5,
            "linger.ms": 5,
        }
    )
    for i in range(200):
        produce_retrying(
            p,
            topic,
            b"v%d" % i,
            b"k%d" % i,
            partition=i % 2,
            on_delivery=lambda err, msg: delivered.append((err, msg.partition())),
            backoff_s=0.01,
        )
    assert p.flush(30) == 0
    assert [e for e, _ in delivered if e is not None] == []
    assert sorted(part for _, part in delivered) == [0] * 100 + [1] * 100
