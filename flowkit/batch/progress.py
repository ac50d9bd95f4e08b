"""What the progress line says while a run's batches run: how many, the calls they answered,
and an estimate of the time left from the provider's request counts."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Progress:
    """What the progress display shows while batches run."""

    batches: int = 0
    running: int = 0
    calls: int = 0
    answered: int = 0
    failed: int = 0
    running_counts: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    """Per running batch (nonce): requests done, requests in all, seconds it has run."""

    def seconds_left(self) -> float | None:
        """When the slowest running batch ends if it goes on at its pace so far; None before
        any has reported progress."""
        left = [
            seconds * (total - done) / done
            for done, total, seconds in self.running_counts.values()
            if done
        ]
        return max(left) if left else None

    def describe(self) -> str:
        """One line for the progress display."""
        text = (
            f"batches {self.batches} ({self.running} running) · calls {self.calls}: "
            f"{self.answered} answered, {self.failed} failed"
        )
        left = self.seconds_left()
        return text if left is None else f"{text} · ~{_duration(left)} left"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
