"""What a classic group's JoinGroup asks about all of its members, kept one member change at a
time, as Kafka's ClassicGroup keeps ``supportedProtocols`` (how many members support each
protocol name) and ``numMembersAwaitingJoinResponse``: whether a joining member's protocols
fit the group, and whether every member has joined the rebalance.  The scans they replace
cost O(members) on every JoinGroup, O(members^2) per rebalance (issue 27, W24 at 1,000
members: 40% of the event loop's busy time, docs/scale.md).

One writer: the group (classic.Group) calls ``add``/``remove`` when a member enters or leaves
its ``members``, and changes a member's protocols and parked JoinGroup only through
``set_protocols`` and ``set_awaiting_join`` while the member is in ``members``."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Protocol


class TalliedMember(Protocol):
    protocols: list[tuple[str, bytes]]
    awaiting_join: Hashable | None


class MemberTally:
    __slots__ = ("_supported", "awaiting_join")

    def __init__(self) -> None:
        self._supported: dict[str, int] = {}  # protocol name -> members supporting it
        self.awaiting_join = 0  # members with a parked JoinGroup

    def add(self, m: TalliedMember) -> None:
        self._count(m.protocols, 1)
        if m.awaiting_join is not None:
            self.awaiting_join += 1

    def remove(self, m: TalliedMember) -> None:
        self._count(m.protocols, -1)
        if m.awaiting_join is not None:
            self.awaiting_join -= 1

    def set_protocols(self, m: TalliedMember, protocols: Iterable[tuple[str, bytes]]) -> None:
        self._count(m.protocols, -1)
        m.protocols = list(protocols)
        self._count(m.protocols, 1)

    def set_awaiting_join(self, m: TalliedMember, reply: Hashable | None) -> None:
        self.awaiting_join += (reply is not None) - (m.awaiting_join is not None)
        m.awaiting_join = reply

    def supported_by_all(self, names: Iterable[str], members: int) -> bool:
        """Whether one of ``names`` is supported by all ``members`` members."""
        return any(self._supported.get(n, 0) == members for n in names)

    def candidates(self, members: int) -> set[str]:
        """The protocol names all ``members`` members support."""
        return {n for n, c in self._supported.items() if c == members}

    def _count(self, protocols: list[tuple[str, bytes]], delta: int) -> None:
        for name in {n for n, _ in protocols}:
            c = self._supported.get(name, 0) + delta
            if c:
                self._supported[name] = c
            else:
                del self._supported[name]
