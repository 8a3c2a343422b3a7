"""``meta.properties`` in every log dir (Kafka ZooKeeper mode's BrokerMetadataCheckpoint).

A Java properties file naming the broker and cluster the dir belongs to::

    #
    #<date>
    cluster.id=<base64url cluster id>
    version=0
    broker.id=<id>

At start, Kafka refuses a dir that belongs to another broker or cluster (a disk moved from
another machine, a wrong zookeeper.connect) with InconsistentBrokerIdException /
InconsistentClusterIdException; pybroker stops the start the same way, with Kafka's messages
(:class:`MetaPropertiesError`), then writes the file into every online dir that lacks it or
whose content differs.  Written atomically (temporary file, fsync, rename).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FILE = "meta.properties"


class MetaPropertiesError(Exception):
    """A log dir belongs to another broker or cluster."""


def read(directory: Path) -> dict[str, str] | None:
    """The file's key=value pairs, or None if there is none (a new dir)."""
    try:
        text = (directory / FILE).read_text()
    except FileNotFoundError:
        return None
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def check_broker_id(directory: Path, broker_id: int) -> None:
    props = read(directory)
    if props is None or "broker.id" not in props:
        return
    if props["broker.id"] != str(broker_id):
        raise MetaPropertiesError(
            f"Configured broker.id {broker_id} doesn't match stored broker.id "
            f"Some({props['broker.id']}) in meta.properties ({directory}). If you moved your "
            "data, make sure your configured broker.id matches. If you intend to create a new "
            "broker, you should remove all data in your data directories (log.dirs)."
        )


def check_cluster_id(directory: Path, cluster_id: str) -> None:
    props = read(directory)
    if props is None or "cluster.id" not in props:
        return
    if props["cluster.id"] != cluster_id:
        raise MetaPropertiesError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId "
            f"Some({props['cluster.id']}) in meta.properties ({directory}). The broker is "
            "trying to join the wrong cluster. Configured zookeeper.connect may be wrong."
        )


def write(directory: Path, broker_id: int, cluster_id: str) -> None:
    """Write the file unless it already says exactly this."""
    want = {"version": "0", "broker.id": str(broker_id), "cluster.id": cluster_id}
    if read(directory) == want:
        return
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    data = f"#\n#{stamp}\ncluster.id={cluster_id}\nversion=0\nbroker.id={broker_id}\n"
    tmp = directory / (FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / FILE)
