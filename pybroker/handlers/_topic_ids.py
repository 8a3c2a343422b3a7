"""Topic ids to names, for the APIs that name topics by id (Fetch v13+, Metadata v10+,
DescribeTopicPartitions).

The cluster's metadata cache is keyed by name.  An index by id is kept per cluster object and
checked on every hit against the current TopicInfo (a topic deleted and created again under the
same name has a new id), and rebuilt on a miss at most once per ``Resolver``, so a request that
names an unknown id costs one pass over the topics, not one per partition.
"""

from __future__ import annotations

import uuid
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.coord.metadata.cluster import Cluster

ZERO = uuid.UUID(int=0)

_INDEX: weakref.WeakKeyDictionary[Cluster, dict[uuid.UUID, str]] = weakref.WeakKeyDictionary()


class Resolver:
    """Resolves topic ids for one request."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._rebuilt = False

    def name(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with ``topic_id`` now, or None (unknown or the zero id)."""
        if topic_id is None or topic_id == ZERO:
            return None
        topics = self.cluster.topics
        index = _INDEX.get(self.cluster)
        if index is not None:
            name = index.get(topic_id)
            if name is not None:
                info = topics.get(name)
                if info is not None and info.topic_id == topic_id:
                    return name
        if self._rebuilt:
            return None
        self._rebuilt = True
        index = {info.topic_id: name for name, info in topics.items()}
        _INDEX[self.cluster] = index
        return index.get(topic_id)
