"""Kafka's windowed rate (org.apache.kafka.common.metrics.stats.Rate over a WindowedSum) and
the throttle time of a violated quota (QuotaUtils.throttleTime), without I/O: times are
passed in (milliseconds).

A :class:`WindowedRate` keeps ``samples`` windows of ``window_ms`` each (Kafka's
quota.window.num = 11 and quota.window.size.seconds = 1).  Recording into a window that is
complete starts the next one (reusing the oldest slot), its start aligned to the grid of
the previous window.  Samples older than ``samples * window_ms`` are reset before a measure.
The rate is the sum of the samples over the elapsed time since the oldest sample started,
counted as at least ``samples - 1`` full windows (so a burst in the first second is not
measured over one second only) and at least 1 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Sample:
    start_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0.0


@dataclass
class WindowedRate:
    samples: int = 11
    window_ms: int = 1000
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms >= sample.start_ms + self.window_ms:
            previous_end = sample.start_ms + self.window_ms
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
            # Kafka 3.7+: the new window starts on the previous window's grid
            sample.reset(now_ms - (now_ms - previous_end) % self.window_ms)
        sample.value += value

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for s in self._samples:
            if now_ms - s.start_ms >= expire:
                s.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """Rate.windowSize: the time the measured total is divided by."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def measure(self, now_ms: int) -> float:
        """The rate per second."""
        size = self.window_size_ms(now_ms)
        return self.total(now_ms) / (size / 1000.0)


def throttle_time_ms(rate: WindowedRate, bound: float, now_ms: int) -> int:
    """QuotaUtils.throttleTime: the delay X that brings the observed rate O back to the
    bound T over the window W, O * W / (W + X) = T, so X = (O - T) / T * W; 0 within the
    bound."""
    observed = rate.measure(now_ms)
    if observed <= bound:
        return 0
    # Java's Math.round: half up
    return int((observed - bound) / bound * rate.window_size_ms(now_ms) + 0.5)
