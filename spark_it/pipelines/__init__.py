"""Small Spark pipelines against a Kafka-compatible broker (pybroker), runnable by hand:

    python -m spark_it.pipelines.files_to_topic --bootstrap 127.0.0.1:9092 --topic orders \
        --input /data/orders.csv --key-column id
    python -m spark_it.pipelines.enrich_topic --bootstrap 127.0.0.1:9092 --source orders \
        --sink orders-enriched --checkpoint /tmp/enrich-ckpt
    python -m spark_it.pipelines.topic_to_files --bootstrap 127.0.0.1:9092 \
        --topic orders-enriched --out /tmp/orders-parquet --checkpoint /tmp/orders-ckpt

files_to_topic is one batch write of what the files hold now. enrich_topic and
topic_to_files are one `trigger(availableNow=True)` pass each: they process what the topic
holds now and stop; the checkpoint makes the next run continue where this one ended. The
tests in spark_it/ call the same functions (docs/spark.md, "Pipelines").
"""
