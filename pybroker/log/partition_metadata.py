"""Kafka's ``partition.metadata`` file: which incarnation of a topic a partition directory holds.

A topic deleted and created again under the same name gets a new topic id; the directory name
(``<topic>-<partition>``) cannot tell the two apart, this file can (Kafka's
PartitionMetadataFile)::

    version: 0
    topic_id: <the id's 16 bytes, base64url without padding>

Written (temporary file, rename; no fsync, which on a busy disk would hold the event loop for
each new partition) when a log is created for a known topic id.  A directory without a
readable file -- written before this file existed, or lost in a crash -- adopts the id it is
opened for: at worst the check is skipped once, never is a log wrongly replaced.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

FILE_NAME = "partition.metadata"
ZERO = uuid.UUID(int=0)


def other_incarnation(log_topic_id: uuid.UUID | None, topic_id: uuid.UUID | None) -> bool:
    """True when a log holding ``log_topic_id`` belongs to another incarnation of the topic
    than ``topic_id`` (None or the zero id: unknown, never a mismatch)."""
    return log_topic_id is not None and topic_id not in (None, ZERO) and log_topic_id != topic_id


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): base64url of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def read(directory: Path) -> uuid.UUID | None:
    """The topic id in ``directory``'s partition.metadata; None when absent or unreadable."""
    try:
        text = (directory / FILE_NAME).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    if fields.get("version") != "0" or "topic_id" not in fields:
        return None
    try:
        raw = base64.urlsafe_b64decode(fields["topic_id"] + "==")
        return uuid.UUID(bytes=raw)
    except ValueError:
        return None


def write(directory: Path, topic_id: uuid.UUID) -> None:
    data = f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n".encode()
    path = directory / FILE_NAME
    tmp = directory / (FILE_NAME + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)
