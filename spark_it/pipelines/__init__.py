"""Small Spark pipelines against a Kafka-compatible broker (pybroker), runnable by hand:

    python -m spark_it.pipelines.topic_to_files --bootstrap 127.0.0.1:9092 --topic events \
        --out /tmp/events-parquet --checkpoint /tmp/events-ckpt
    python -m spark_it.pipelines.enrich_topic --bootstrap 127.0.0.1:9092 --source events \
        --sink events-enriched --checkpoint /tmp/enrich-ckpt

Each run is one `trigger(availableNow=True)` pass: it processes what the topic holds now and
stops; the checkpoint makes the next run continue where this one ended. The tests in
spark_it/ call the same functions.
"""
