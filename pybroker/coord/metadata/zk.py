"""ZooKeeperStore: the metadata store on a ZooKeeper ensemble through kazoo (the only module
that imports kazoo).

Invariants: the event loop never blocks on kazoo (every call is a ``*_async`` one, bridged onto
the loop through one batched hand-off, :class:`LoopInbox`; blocking ``stop``/``close`` run in a
thread); kazoo's threads never call kazoo; a watch dropped with the connection is delivered as
CHANGED / CHILD so its watcher re-reads; a write is never sent again.  The rules in full:
docs/internals.md ("pybroker/coord/metadata/zk.py").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.serialization import GetData as KzGetData
from kazoo.protocol.serialization import SetData as KzSetData
from kazoo.protocol.serialization import Transaction as KzTransaction
from kazoo.protocol.states import Callback, KeeperState
from kazoo.protocol.states import EventType as KzEventType
from kazoo.retry import KazooRetry

from pybroker.coord.metadata.store import (
    CONNECTED,
    LOST,
    SUSPENDED,
    BadVersionError,
    Check,
    ConnectionLossError,
    Create,
    Delete,
    EventType,
    InvalidPathError,
    MetadataStore,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SessionListener,
    SetData,
    Stat,
    StoreError,
    WatchCallback,
    WatchedEvent,
    join,
    parent_of,
    validate_path,
)
from pybroker.coord.metadata.zk_bridge import LoopInbox, gather_results, stop_and_close_in_thread

log = logging.getLogger(__name__)

_ERRORS: list[tuple[type[BaseException], type[StoreError]]] = [
    (kz.NoNodeError, NoNodeError),
    (kz.NodeExistsError, NodeExistsError),
    (kz.BadVersionError, BadVersionError),
    (kz.NotEmptyError, NotEmptyError),
    (kz.NoChildrenForEphemeralsError, NoChildrenForEphemeralsError),
    (kz.BadArgumentsError, InvalidPathError),
    (kz.SessionExpiredError, SessionExpiredError),
    (kz.ConnectionClosedError, ConnectionLossError),
    (kz.ConnectionLoss, ConnectionLossError),
    (kz.OperationTimeoutError, ConnectionLossError),
]

_EVENT_TYPES = {
    KzEventType.CREATED: EventType.CREATED,
    KzEventType.DELETED: EventType.DELETED,
    KzEventType.CHANGED: EventType.CHANGED,
    KzEventType.CHILD: EventType.CHILD,
}

# get_many: gets in flight at once (ZooKeeper's globalOutstandingLimit defaults to 1000 for the
# whole server; a window below it keeps one broker from starving the others)
GET_MANY_WINDOW = 500

_STATES = {KazooState.CONNECTED: CONNECTED, KazooState.SUSPENDED: SUSPENDED, KazooState.LOST: LOST}


def _map_error(exc: BaseException, path: str | None = None) -> BaseException:
    if isinstance(exc, StoreError):
        return exc
    for kz_type, ours in _ERRORS:
        if isinstance(exc, kz_type):
            err = ours(f"{ours.__name__}: {path}" if path else str(exc) or ours.__name__, path)
            err.__cause__ = exc
            return err
    if isinstance(exc, kz.KazooException):
        err = StoreError(f"ZooKeeper error {type(exc).__name__} on {path}: {exc}", path)
        err.__cause__ = exc
        return err
    return exc


_REFUSING = (KeeperState.AUTH_FAILED, KeeperState.CLOSED, KeeperState.EXPIRED_SESSION)
# a request's outcomes that are no answer of the server's in the session
_UNANSWERED = (
    kz.ConnectionLoss,
    kz.ConnectionClosedError,
    kz.SessionExpiredError,
    kz.OperationTimeoutError,
)


def _send_together(client: KazooClient, requests: list[Any]) -> list[Any]:
    """Queue kazoo requests on the connection in order with one wake-up of kazoo's connection
    thread for all of them; their IAsyncResults.  kazoo's ``*_async`` calls wake it once
    each, a send on its socket pair from the calling thread, which then waits for the GIL
    back from kazoo's thread: 0.4 ms a request on an idle machine, more under load (5,000
    gets 1.9 s of the loop, 0.06 s this way; W22's windows of 500 ISR writes and reads
    held the loops for seconds, docs/scale.md).  What kazoo's ``_call`` does for one, for
    many: a client closed, expired or refused is kazoo's own answer to each."""
    results = [client.handler.async_result() for _ in requests]
    write_sock = client._connection._write_sock
    if client._state in _REFUSING or write_sock is None:
        for request, result in zip(requests, results, strict=True):
            client._call(request, result)
        return results
    client._queue.extend(zip(requests, results, strict=True))
    try:
        write_sock.sendall(b"\0" * len(requests))
    except OSError:  # closed meanwhile (kazoo's _call: the same answer)
        for result in results:
            if not result.ready():
                result.set_exception(kz.ConnectionClosedError("Connection has been closed"))
    return results


def _stat(zstat: Any) -> Stat:
    return Stat(
        zstat.version,
        zstat.ephemeralOwner,
        zstat.ctime,
        zstat.mtime,
        zstat.numChildren,
        zstat.cversion,
    )


def split_connect(connect: str) -> tuple[str, str]:
    """'h1:2181,h2:2181/kafka' -> ('h1:2181,h2:2181', '/kafka'); chroot '' when absent."""
    i = connect.find("/")
    if i < 0:
        return connect, ""
    hosts, chroot = connect[:i], connect[i:].rstrip("/")
    if chroot:
        validate_path(chroot)
    return hosts, chroot


MIN_ATTEMPTS_PER_SESSION = 3


def attempt_hosts(connect: str) -> str:
    """The connect string given to kazoo: its hosts repeated until there are at least
    MIN_ATTEMPTS_PER_SESSION entries, the chroot after them.

    kazoo (as ZooKeeper's Java client) waits up to session timeout / len(hosts) for the
    answer to a connect request.  A ZooKeeper server that is starting listens on its client
    port before it runs (ZOOKEEPER-3916): a connection made in that window is accepted and
    never answered.  With one host, that one attempt took the whole session timeout, so a
    client that reconnected into a restarting server lost its session although the server was
    back within a second.  Repeating the host bounds each attempt to a third of the session,
    leaving time for the next inside it (what a 3-server ensemble's connect string gives)."""
    hosts, chroot = split_connect(connect)
    entries = [h for h in hosts.split(",") if h]
    copies = -(-MIN_ATTEMPTS_PER_SESSION // max(1, len(entries)))
    return ",".join(entries * copies) + chroot


class ZooKeeperStore(MetadataStore):
    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        *,
        connect_timeout_s: float = 18.0,
        max_reconnect_delay_s: float = 2.0,
    ) -> None:
        self.connect = connect
        self._hosts, self._chroot = split_connect(connect)
        self._session_timeout_ms = session_timeout_ms
        self._connect_timeout_s = connect_timeout_s
        self._max_reconnect_delay_s = max_reconnect_delay_s
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[SessionListener] = []
        self._connected: asyncio.Future[None] | None = None
        self._inbox: LoopInbox | None = None
        self._starting = True  # until started_up(): see _while_starting
        # the session probe (session_heard): its thread, its stop, what it heard last
        self._probe: threading.Thread | None = None
        self._probe_stop = threading.Event()
        self._heard: tuple[float, int] | None = None

    # ------------------------------------------------------------------ lifecycle

    def _new_client(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=attempt_hosts(hosts),
            timeout=self._session_timeout_ms / 1000.0,
            connection_retry=KazooRetry(
                max_tries=-1, delay=0.05, backoff=2, max_delay=self._max_reconnect_delay_s
            ),
            command_retry=KazooRetry(max_tries=0),
        )

    async def start(self) -> None:
        if self._client is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._inbox = LoopInbox(self._loop)
        if self._chroot:
            await self._ensure_chroot()
        client = self._new_client(self._hosts + self._chroot)
        self._client = client
        self._connected = self._loop.create_future()
        client.add_listener(self._on_state)
        log.info(
            "connecting to ZooKeeper at %s: waiting up to %g s (zookeeper.connection.timeout.ms)",
            self.connect,
            self._connect_timeout_s,
        )
        client.start_async()
        try:
            await asyncio.wait_for(asyncio.shield(self._connected), self._connect_timeout_s)
        except TimeoutError:
            self._client = None
            await stop_and_close_in_thread(client)
            raise ConnectionLossError(
                f"could not connect to ZooKeeper at {self._hosts} within "
                f"{self._connect_timeout_s:g}s (zookeeper.connection.timeout.ms; "
                f"zookeeper.connect={self.connect})"
            ) from None
        self._probe_stop.clear()
        self._probe = threading.Thread(
            target=self._run_probe, args=(client,), name="zookeeper-session-probe", daemon=True
        )
        self._probe.start()

    def _run_probe(self, client: KazooClient) -> None:
        """The session probe's thread: every 0.4 session timeouts, an ``exists`` of the
        root, sent and answered without the event loop; an answer in a session records the
        send time (session_heard).  Runs while the event loop is held up by long work, so
        the lease (Cluster.lease_ok) can tell a busy loop from a process that was stopped.
        Not more often: kazoo counts a request sent as a ping and pings only after a third
        of the session without one, so probes at shorter intervals would keep it from ever
        seeing a server that stopped answering (tests/test_store.py's SIGSTOPped server)."""
        interval = 0.4 * self._session_timeout_ms / 1000.0
        while not self._probe_stop.wait(interval):
            cid = client.client_id
            if cid is None or not client.connected:
                continue
            sent = time.monotonic()
            try:
                self._hear(client, client.exists_async("/"), sent)
            except Exception:  # noqa: BLE001 - a closing client: the next round decides
                continue

    def _hear(self, client: KazooClient, result: Any, sent: float) -> None:
        """When ``result`` (of a request sent at ``sent``) is answered by the server in the
        session current now, that session was alive at ``sent``: session_heard records it.
        The probe's requests, and the first request of each pipelined window (get_many,
        set_many, multi_many): the probe's answer waits behind the windows sent before it on
        the same connection (a controller's 22,000 multis at W22's 100,000 replicas, its
        lease suspended for want of it), while the windows' own answers keep coming."""
        cid = client.client_id
        if cid is None:
            return
        session = cid[0]

        def done(result: Any) -> None:  # kazoo's thread
            if not result.successful() and isinstance(result.exception, _UNANSWERED):
                return
            now_id = client.client_id
            if now_id is not None and now_id[0] == session:
                heard = self._heard
                if heard is None or heard[0] < sent:
                    self._heard = (sent, session)

        result.rawlink(done)

    def session_heard(self) -> tuple[float, int] | None:
        return self._heard

    async def _ensure_chroot(self) -> None:
        """Kafka creates a missing chroot: connect without it, ensure it, disconnect."""
        bare = ZooKeeperStore(
            self._hosts,
            self._session_timeout_ms,
            connect_timeout_s=self._connect_timeout_s,
        )
        await bare.start()
        try:
            await bare.ensure_path(self._chroot)
        finally:
            await bare.close()

    async def close(self) -> None:
        self._starting = False
        client, self._client = self._client, None
        if client is None:
            return
        self._probe_stop.set()
        client.remove_listener(self._on_state)
        await stop_and_close_in_thread(client)

    @property
    def session_id(self) -> int:
        if self._client is None or self._client.client_id is None:
            return 0
        return self._client.client_id[0]

    def _on_state(self, state: str) -> None:
        """kazoo's thread: hop onto the loop, nothing else."""
        inbox = self._inbox
        if inbox is not None:
            inbox.put(self._deliver_state, _STATES.get(state, state))

    def _deliver_state(self, state: str) -> None:
        if state == CONNECTED and self._connected is not None and not self._connected.done():
            self._connected.set_result(None)
        log.info("ZooKeeper session %s (%s)", state, self.connect)
        for cb in list(self._listeners):
            try:
                cb(state)
            except Exception:
                log.exception("session listener %r failed", cb)

    def add_session_listener(self, cb: SessionListener) -> None:
        self._listeners.append(cb)

    def remove_session_listener(self, cb: SessionListener) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)

    # ------------------------------------------------------------------ bridging

    def _send_window(self, client: KazooClient, requests: list[Any]) -> list[Any]:
        """_send_together, the first answer heard as the session's (``_hear``)."""
        sent_at = time.monotonic()
        sent = _send_together(client, requests)
        if sent:
            self._hear(client, sent[0], sent_at)
        return sent

    def _rooted(self, path: str) -> str:
        """A valid path as kazoo sends it: under the chroot."""
        chroot = self._chroot
        if not chroot:
            return path
        return chroot if path == "/" else chroot + path

    def _kz(self) -> KazooClient:
        if self._client is None:
            raise ConnectionLossError("the ZooKeeper store is not started")
        return self._client

    async def _await(
        self, issue: Callable[[], Any], path: str | None = None, *, read: bool = False
    ) -> Any:
        """Send a call (``issue`` returns kazoo's IAsyncResult) and bridge its result into the
        loop; a read, while starting, is sent again after a lost connection
        (``_while_starting``).  A write is sent once: its outcome is unknown when the
        connection is lost (ZooKeeper may have applied it), which its caller reads."""
        if not read:
            return await self._bridge(issue(), path)
        return await self._while_starting(lambda: self._bridge(issue(), path), path)

    async def _while_starting(self, call: Callable[[], Awaitable[Any]], path: str | None) -> Any:
        """``call()`` (a read); until ``started_up()``, if it fails because the connection (or
        the session) was lost it is sent again once it is back, for up to
        zookeeper.connection.timeout.ms from the first failure (Kafka's KafkaZkClient sends
        its requests again until connected; its start fails after that bound without a
        connection), then ConnectionLossError naming the setting."""
        deadline: float | None = None
        while True:
            try:
                if deadline is None:
                    return await call()
                return await asyncio.wait_for(call(), max(deadline - time.monotonic(), 0.01))
            except ConnectionLossError as e:
                if not self._starting or self._client is None:
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._connect_timeout_s
                    log.warning(
                        "ZooKeeper connection lost while starting (%s on %s): waiting up to "
                        "%g s (zookeeper.connection.timeout.ms) for it to come back",
                        type(e).__name__,
                        path,
                        self._connect_timeout_s,
                    )
                elif now >= deadline:
                    raise self._not_back(path) from e
                await asyncio.sleep(min(0.2, max(deadline - now, 0.0)))
            except TimeoutError as e:
                if deadline is None:
                    raise
                raise self._not_back(path) from e

    def _not_back(self, path: str | None) -> ConnectionLossError:
        return ConnectionLossError(
            f"the ZooKeeper connection was lost while starting and did not come back within "
            f"{self._connect_timeout_s:g} s (zookeeper.connection.timeout.ms; "
            f"zookeeper.connect={self.connect})",
            path,
        )

    def started_up(self) -> None:
        self._starting = False

    async def _bridge(self, async_result: Any, path: str | None = None) -> Any:
        """Bridge a kazoo IAsyncResult into the loop."""
        loop = self._loop
        inbox = self._inbox
        assert loop is not None and inbox is not None
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if fut.done():
                return
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(_map_error(value, path))

        def done(result: Any) -> None:  # kazoo's thread
            if result.successful():
                args = (True, result.value)
            else:
                args = (False, result.exception)
            inbox.put(settle, *args)

        async_result.rawlink(done)
        return await fut

    def _watcher(self, cb: WatchCallback, path: str, dropped_type: EventType) -> Callable:
        inbox = self._inbox
        assert inbox is not None

        def on_event(event: Any) -> None:  # kazoo's thread
            etype = _EVENT_TYPES.get(event.type)
            wpath = event.path if etype is not None and event.path else path
            inbox.put(_run_watch, cb, WatchedEvent(etype or dropped_type, wpath))

        return on_event

    # ------------------------------------------------------------------ the interface

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        validate_path(path)
        return await self._await(
            lambda: self._kz().create_async(
                path, bytes(data), ephemeral=ephemeral, sequence=sequence, makepath=makepath
            ),
            path,
        )

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        validate_path(path)
        w = self._watcher(watch, path, EventType.CHANGED) if watch else None
        data, zstat = await self._await(
            lambda: self._kz().get_async(path, watch=w), path, read=True
        )
        return (data or b""), _stat(zstat)

    async def get_many(
        self, paths: list[str], watches: list[WatchCallback | None] | None = None
    ) -> list[tuple[bytes, Stat] | None]:
        """Up to GET_MANY_WINDOW gets in flight on the connection at once; the results are
        gathered on kazoo's thread and handed to the loop once per window (a hop per result
        would cost a wake-up of the loop each)."""
        out: list[tuple[bytes, Stat] | None] = []
        for start in range(0, len(paths), GET_MANY_WINDOW):
            chunk = paths[start : start + GET_MANY_WINDOW]
            ws = watches[start : start + GET_MANY_WINDOW] if watches else None
            out += await self._while_starting(
                lambda c=chunk, w=ws: self._get_window(c, w), chunk[0]
            )
        return out

    async def _get_window(
        self, paths: list[str], watches: list[WatchCallback | None] | None
    ) -> list[tuple[bytes, Stat] | None]:
        client = self._kz()
        requests = []
        for i, path in enumerate(paths):
            validate_path(path)
            cb = watches[i] if watches else None
            w = self._watcher(cb, path, EventType.CHANGED) if cb else None
            requests.append(KzGetData(self._rooted(path), w))
        sent = self._send_window(client, requests)
        out: list[tuple[bytes, Stat] | None] = []
        for i, (ok, value) in enumerate(await self._gather(sent)):
            if ok:
                data, zstat = value
                out.append(((data or b""), _stat(zstat)))
            elif isinstance(value, kz.NoNodeError):
                out.append(None)
            else:
                raise _map_error(value, paths[i])
        return out

    async def _gather(self, sent: list[Any]) -> list[tuple[bool, Any]]:
        loop, inbox = self._loop, self._inbox
        assert loop is not None and inbox is not None
        return await gather_results(loop, inbox, sent)

    async def barrier(self) -> None:
        """kazoo delivers watch events on its callback thread and call results on its
        completion thread: a result can reach the loop before a watch event the server sent
        earlier.  A marker queued behind the events already on the callback thread's queue
        (the connection thread queued every event it read before the latest result) runs
        after them, and its hand-off to the loop after theirs."""
        loop, inbox = self._loop, self._inbox
        assert loop is not None and inbox is not None
        fut: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not fut.done():
                fut.set_result(None)

        self._kz().handler.dispatch_callback(Callback("watch", inbox.put, (settle,)))
        await fut

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        validate_path(path)
        return _stat(
            await self._await(lambda: self._kz().set_async(path, bytes(data), version), path)
        )

    async def set_many(self, writes: list[tuple[str, bytes, int]]) -> list[Stat | StoreError]:
        """Up to GET_MANY_WINDOW sets in flight on the connection at once, each with its own
        outcome (MetadataStore.set_many); results handed to the loop once per window.  Sent
        once (writes: a lost connection leaves their outcome unknown, ConnectionLossError)."""
        out: list[Stat | StoreError] = []
        for start in range(0, len(writes), GET_MANY_WINDOW):
            out += await self._set_window(writes[start : start + GET_MANY_WINDOW])
        return out

    async def _set_window(self, writes: list[tuple[str, bytes, int]]) -> list[Stat | StoreError]:
        client = self._kz()
        requests = []
        for path, data, version in writes:
            validate_path(path)
            requests.append(KzSetData(self._rooted(path), bytes(data), version))
        sent = self._send_window(client, requests)
        out: list[Stat | StoreError] = []
        for i, (ok, value) in enumerate(await self._gather(sent)):
            if ok:
                out.append(_stat(value))
                continue
            err = _map_error(value, writes[i][0])
            if not isinstance(err, StoreError):
                raise err
            out.append(err)
        return out

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if recursive:
            try:
                children = await self.get_children(path)
            except NoNodeError:
                children = []
            for child in children:
                try:
                    await self.delete(join(path, child), recursive=True)
                except NoNodeError:
                    pass
        await self._await(lambda: self._kz().delete_async(path, version), path)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        validate_path(path)
        w = self._watcher(watch, path, EventType.CHANGED) if watch else None
        zstat = await self._await(lambda: self._kz().exists_async(path, watch=w), path, read=True)
        return None if zstat is None else _stat(zstat)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        validate_path(path)
        w = self._watcher(watch, path, EventType.CHILD) if watch else None
        return sorted(
            await self._await(lambda: self._kz().get_children_async(path, watch=w), path, read=True)
        )

    def _commit(self, ops: list[Op]) -> Any:
        """Send ``ops`` as one transaction (a kazoo transaction commits once: a new one for
        each send); kazoo's IAsyncResult."""
        return self._transaction(ops).commit_async()

    def _transaction(self, ops: list[Op]) -> Any:
        """``ops`` as a kazoo TransactionRequest (it puts the paths under the chroot)."""
        tx = self._kz().transaction()
        for op in ops:
            if isinstance(op, Create):
                tx.create(op.path, bytes(op.data), ephemeral=op.ephemeral, sequence=op.sequence)
            elif isinstance(op, SetData):
                tx.set_data(op.path, bytes(op.data), op.version)
            elif isinstance(op, Delete):
                tx.delete(op.path, op.version)
            else:
                tx.check(op.path, op.version)
        return tx

    async def multi(self, ops: list[Op]) -> None:
        _check_ops(ops)
        if not ops:
            return
        err = _multi_error(ops, await self._await(lambda: self._commit(ops)))
        if err is not None:
            raise err

    async def multi_many(self, batches: list[list[Op]]) -> list[StoreError | None]:
        """Up to GET_MANY_WINDOW transactions in flight at once, each with its own outcome
        (MetadataStore.multi_many); results handed to the loop once per window."""
        for ops in batches:
            _check_ops(ops)
        out: list[StoreError | None] = []
        for start in range(0, len(batches), GET_MANY_WINDOW):
            out += await self._multi_window(batches[start : start + GET_MANY_WINDOW])
        return out

    async def _multi_window(self, batches: list[list[Op]]) -> list[StoreError | None]:
        requests = [KzTransaction(self._transaction(ops).operations) for ops in batches]
        sent = self._send_window(self._kz(), requests)
        out: list[StoreError | None] = []
        for ops, (ok, value) in zip(batches, await self._gather(sent), strict=True):
            err = _multi_error(ops, value) if ok else _map_error(value, ops[0].path)
            if err is not None and not isinstance(err, StoreError):
                raise err
            out.append(err)
        return out

    async def ensure_path(self, path: str) -> None:
        validate_path(path)
        if path == "/":
            return
        if await self.exists(path) is not None:
            return
        await self.ensure_path(parent_of(path))
        try:
            await self.create(path)
        except NodeExistsError:
            pass


def _check_ops(ops: list[Op]) -> None:
    for op in ops:
        validate_path(op.path)
        if not isinstance(op, (Create, SetData, Delete, Check)):
            raise TypeError(f"not a store operation: {op!r}")


def _multi_error(ops: list[Op], results: list[Any]) -> BaseException | None:
    """A committed transaction's per-op results: the first failed op's error (its
    ``op_index`` set), or None when every op was applied."""
    for i, res in enumerate(results):
        if isinstance(res, BaseException) and not isinstance(res, kz.RolledBackError):
            err = _map_error(res, ops[i].path)
            if isinstance(err, StoreError):
                err.op_index = i
            return err
    if any(isinstance(r, BaseException) for r in results):
        return StoreError("multi rolled back")
    return None


def _run_watch(cb: WatchCallback, event: WatchedEvent) -> None:
    try:
        cb(event)
    except Exception:
        log.exception("metadata watch callback %r failed for %s", cb, event)
