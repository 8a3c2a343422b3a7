"""Response bodies that the group coordinators and the group handlers build alike."""

from __future__ import annotations

from typing import Any


def heartbeat_error(code: int, message: str | None = None) -> dict:
    """ConsumerGroupHeartbeat's and ShareGroupHeartbeat's answer with an error (one layout:
    KIP-932 took KIP-848's): no member id, epoch 0, no assignment."""
    return {
        "error_code": code,
        "error_message": message,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def join_error(code: int, member_id: str = "") -> dict:
    """JoinGroup's answer with an error (no generation, no members)."""
    return {
        "error_code": code,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def sync_reply(code: int, assignment: bytes = b"", group: Any = None) -> dict:
    """SyncGroup's answer: with no error, the (classic) ``group``'s protocol type and name."""
    ok = group is not None and code == 0
    return {
        "error_code": code,
        "protocol_type": group.protocol_type if ok else None,
        "protocol_name": group.protocol_name if ok else None,
        "assignment": assignment,
    }


__all__ = ["heartbeat_error", "join_error", "sync_reply"]
