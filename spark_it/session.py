"""The SparkSession the Spark tests and pipelines use, with Spark's Kafka connector on it.

    from spark_it.session import build_session
    spark = build_session()          # local[2], connector jars from .cache/spark-jars

The jars come from scripts/fetch-spark-deps (pyspark pinned there, connector at the same
version via spark_it/pom.xml). SPARK_JARS_DIR overrides the jar folder.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FETCH_SCRIPT = ROOT / "scripts" / "fetch-spark-deps"
JARS_DIR = Path(os.environ.get("SPARK_JARS_DIR", ROOT / ".cache" / "spark-jars"))
CONNECTOR_PREFIX = "spark-sql-kafka-0-10_"


class SparkDepsError(RuntimeError):
    pass


def connector_jars(fetch: bool = True) -> list[str]:
    """The connector and its non-pyspark dependencies; runs fetch-spark-deps once if missing."""
    if fetch and not glob.glob(str(JARS_DIR / f"{CONNECTOR_PREFIX}*.jar")):
        r = subprocess.run(["bash", str(FETCH_SCRIPT)], cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise SparkDepsError(
                f"scripts/fetch-spark-deps failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
            )
    jars = sorted(glob.glob(str(JARS_DIR / "*.jar")))
    connector = [j for j in jars if Path(j).name.startswith(CONNECTOR_PREFIX)]
    if not connector:
        raise SparkDepsError(
            f"no Spark Kafka connector in {JARS_DIR}: run scripts/fetch-spark-deps"
        )
    import pyspark

    if not Path(connector[0]).name.endswith(f"-{pyspark.__version__}.jar"):
        raise SparkDepsError(
            f"pyspark {pyspark.__version__} but connector {Path(connector[0]).name}: "
            "run scripts/fetch-spark-deps"
        )
    return jars


CENSUS_LOG4J = Path(__file__).resolve().parent / "log4j2-kafka-census.properties"


def build_session(
    app_name: str = "pybroker-spark-it",
    master: str = "local[2]",
    client_log: str | os.PathLike | None = None,
    **conf,
):
    """A small local SparkSession with the connector jars (extra `conf` as dotted keys).

    client_log: a file that receives every request/response of Spark's Kafka clients
    (NetworkClient DEBUG) and their INFO+ messages (log4j2-kafka-census.properties);
    census.py summarizes it.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.jars": ",".join(connector_jars()),
        "spark.driver.memory": "768m",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }
    if client_log is not None:
        settings["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j2.configurationFile=file:{CENSUS_LOG4J} "
            f"-Dspark_it.kafka_client_log={Path(client_log).resolve()}"
        )
    settings.update(conf)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("SPARK_IT_LOG_LEVEL", "WARN"))
    return session


def kafka_options(bootstrap: str, **extra: object) -> dict[str, str]:
    """Reader/writer options: the bootstrap plus client timeouts short enough for tests."""
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.request.timeout.ms": "20000",
        "kafka.default.api.timeout.ms": "40000",
    }
    opts.update({k: str(v) for k, v in extra.items()})
    return opts
