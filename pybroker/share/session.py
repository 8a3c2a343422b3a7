"""Share sessions (KIP-932): Kafka's ShareSessionCache and ShareSessionContext, sans I/O.

A share consumer keeps one share session per (group, member) on each broker it fetches from:
ShareFetch with epoch 0 opens it with the partitions it names (acknowledgements are not
allowed in that request), later requests carry the next epoch (1, 2, ..., wrapping to 1) and
add partitions or forget them, and epoch -1 closes it (ShareFetch or ShareAcknowledge; the
member's Acquired records are released then).  A wrong epoch is INVALID_SHARE_SESSION_EPOCH, an
unknown session SHARE_SESSION_NOT_FOUND, a full cache (group.share.max.share.sessions)
SHARE_SESSION_LIMIT_REACHED.  ``connection`` is any hashable naming the client connection
(the broker passes ``id()`` of the connection's security session, and tells the cache when
that connection closes, before the id can be reused).  A session remembers the connection that opened it: when that
connection closes, the session ends and its member's records are released (Kafka's
ConnectionDisconnectListener).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from pybroker.errors import ErrorCode, KafkaError

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_EPOCH = 2**31 - 1

# (topic id, topic name or None when unknown, partition)
PartitionKey = tuple[object, str | None, int]


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection: Hashable
    epoch: int = 1
    # (topic id, partition) -> key, in the order they were added (Kafka's partitionMap)
    partitions: dict[tuple[object, int], PartitionKey] = field(default_factory=dict)
    answered: set[tuple[object, int]] = field(default_factory=set)  # sent at least once

    @property
    def key(self) -> tuple[str, str]:
        return (self.group_id, self.member_id)


@dataclass
class ShareContext:
    """What one ShareFetch works on: the partitions to fetch (the request's for a full fetch,
    the whole session's for a subsequent one)."""

    full: bool
    final: bool
    partitions: list[PartitionKey]
    session: ShareSession | None

    def must_answer(self, key: PartitionKey, has_news: bool) -> bool:
        """A subsequent fetch answers a partition only with news (records, an error, an
        acknowledgement result) or the first time (Kafka's CachedSharePartition)."""
        if self.full or self.session is None:
            return True
        tp = (key[0], key[2])
        if has_news or tp not in self.session.answered:
            self.session.answered.add(tp)
            return True
        return False


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[Hashable, set[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def new_context(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        requested: Iterable[PartitionKey],
        forgotten: Iterable[tuple[object, int]],
        has_acknowledgements: bool,
        connection: Hashable,
    ) -> ShareContext:
        """Kafka's SharePartitionManager.newContext; raises KafkaError."""
        requested = list(requested)
        if epoch == FINAL_EPOCH:
            session = self.get(group_id, member_id)
            if session is None:
                raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND)
            return ShareContext(True, True, requested, session)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                raise KafkaError(ErrorCode.INVALID_REQUEST)
            self.remove(group_id, member_id)
            if len(self.sessions) >= self.max_sessions:
                raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession(group_id, member_id, connection)
            for key in requested:
                session.partitions[(key[0], key[2])] = key
            self.sessions[session.key] = session
            self._by_connection.setdefault(connection, set()).add(session.key)
            return ShareContext(True, False, requested, session)
        session = self.get(group_id, member_id)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if session.epoch != epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        for key in requested:
            tp = (key[0], key[2])
            if tp not in session.partitions:
                session.partitions[tp] = key
        for tp in forgotten:
            session.partitions.pop(tp, None)
            session.answered.discard(tp)
        session.epoch = next_epoch(session.epoch)
        return ShareContext(False, False, list(session.partitions.values()), session)

    def acknowledge_update(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """ShareAcknowledge's session check (Kafka's acknowledgeSessionUpdate)."""
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session = self.get(group_id, member_id)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            return session
        if session.epoch != epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.epoch = next_epoch(session.epoch)
        return session

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        session = self.sessions.pop((group_id, member_id), None)
        if session is not None:
            keys = self._by_connection.get(session.connection)
            if keys is not None:
                keys.discard(session.key)
                if not keys:
                    del self._by_connection[session.connection]
        return session

    def disconnected(self, connection: Hashable) -> list[ShareSession]:
        """The connection closed: the sessions it opened (removed)."""
        out = []
        for key in self._by_connection.pop(connection, ()):
            session = self.sessions.get(key)
            if session is not None and session.connection == connection:
                del self.sessions[key]
                out.append(session)
        return out
