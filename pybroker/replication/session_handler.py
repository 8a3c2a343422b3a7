"""The follower's side of an incremental fetch session (KIP-227), as Kafka's FetchSessionHandler.

``build(wanted)`` turns the partitions a fetcher wants this round, {(topic, partition): fetch
parameters}, into the Fetch request's session id, epoch, partition list and forgotten list:
the first request (and any after an error) is full, with epoch 0, asking the leader for a
session; later ones list only partitions that are new or whose parameters changed, and forget
those no longer wanted.  A partition whose leader epoch changed or whose fetch offset went back
(truncation) makes the next request full again, so the leader forgets what it last sent for it
and answers it in full.  ``handle_response`` moves the session on (or drops it on an error);
``handle_error`` drops it after a failed request.  Partitions an incremental answer leaves out
had nothing new.  The handler keeps the parameter dicts it is given: a caller passes a new dict
when a partition's parameters change, and the same dict again is unchanged at the cost of an
identity check.  ``build(wanted, changed)``: the caller also names every key whose entry in
``wanted`` was added, replaced or removed since the last build, and an incremental request
looks at those only (the replica fetcher's rounds cost what changed, not its partitions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
FETCH_SESSION_ID_NOT_FOUND = 70
_PARAMS = (
    "fetch_offset",
    "current_leader_epoch",
    "last_fetched_epoch",
    "log_start_offset",
    "partition_max_bytes",
)


def _next_epoch(epoch: int) -> int:
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass
class FetchRequestData:
    session_id: int
    epoch: int
    partitions: dict[tuple[str, int], dict]  # to send
    forgotten: list[tuple[str, int]]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


@dataclass
class FetchSessionHandler:
    session_id: int = 0
    epoch: int = INITIAL_EPOCH
    # what the leader's session holds for each partition (the parameters last sent)
    sent: dict[tuple[str, int], dict] = field(default_factory=dict)

    def build(
        self, wanted: dict[tuple[str, int], dict], changed: set | None = None
    ) -> FetchRequestData:
        sent = self.sent
        looked = wanted if changed is None else {k: wanted.get(k) for k in changed}
        if self.epoch != INITIAL_EPOCH:
            for key, params in looked.items():
                if params is None:
                    continue
                old = sent.get(key)
                if (
                    old is not None
                    and old is not params
                    and (
                        params["current_leader_epoch"] != old["current_leader_epoch"]
                        or params["fetch_offset"] < old["fetch_offset"]
                    )
                ):
                    self.epoch = INITIAL_EPOCH  # close it and start again in full
                    break
        if self.epoch == INITIAL_EPOCH:
            self.sent = dict(wanted)
            return FetchRequestData(self.session_id, INITIAL_EPOCH, dict(wanted), [])
        if changed is not None:
            return self._incremental(looked)  # type: ignore[arg-type]
        send = {}
        for key, params in wanted.items():
            old = sent.get(key)
            if old is params:
                continue
            if old is None or any(old[p] != params[p] for p in _PARAMS):
                send[key] = params
            sent[key] = params
        # every wanted partition is in ``sent`` now: the same size means nothing to forget
        forgotten = [] if len(sent) == len(wanted) else [k for k in sent if k not in wanted]
        for key in forgotten:
            del sent[key]
        return FetchRequestData(self.session_id, self.epoch, send, forgotten)

    def _incremental(self, looked: dict[tuple[str, int], dict | None]) -> FetchRequestData:
        """An incremental request from the changed keys only (None: no longer wanted)."""
        sent = self.sent
        send, forgotten = {}, []
        for key, params in looked.items():
            old = sent.get(key)
            if params is None:
                if old is not None:
                    forgotten.append(key)
                    del sent[key]
                continue
            if old is params:
                continue
            if old is None or any(old[p] != params[p] for p in _PARAMS):
                send[key] = params
            sent[key] = params
        return FetchRequestData(self.session_id, self.epoch, send, forgotten)

    def handle_response(self, request: FetchRequestData, error: int, session_id: int) -> None:
        if error != 0:
            if error == FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = 0
            self.epoch = INITIAL_EPOCH  # full next time (closing the session we named)
            return
        if session_id == 0:
            # no session (the leader's cache is full, or it closed ours): full fetches
            self.session_id, self.epoch = 0, INITIAL_EPOCH
            return
        if request.full:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = _next_epoch(self.epoch)

    def handle_error(self) -> None:
        self.epoch = INITIAL_EPOCH
