"""Expiring a ZooKeeper session on purpose, for the tests of what a broker does when its
session is lost."""

from __future__ import annotations

from kazoo.client import KazooClient  # tests may use kazoo directly
from kazoo.handlers.threading import KazooTimeoutError


def expire_session(connect: str, client_id: tuple[int, bytes], tries: int = 50) -> None:
    """Expire the session ``client_id`` (kazoo's (session id, password)) the classic way:
    another client connects in it, which takes the session's connection over, and closes it.
    The session's owner reconnects at once (ZooKeeperStore's connect string gives kazoo its
    host up to three times, and kazoo tries the entries of a cycle without a pause), and may
    take the connection back before the close is sent: then the close ends nothing, so this
    repeats (also when the two took the connection from each other until the start's
    timeout) until connecting with the id gets a new session."""
    for _ in range(tries):
        k = KazooClient(hosts=connect, client_id=client_id)
        try:
            k.start(timeout=3)
        except KazooTimeoutError:  # the owner took the connection back each time: again
            k.stop()
            k.close()
            continue
        gone = k.client_id is None or k.client_id[0] != client_id[0]
        k.stop()
        k.close()
        if gone:
            return
    raise AssertionError(f"session {client_id[0]:#x} still alive after {tries} closes")
