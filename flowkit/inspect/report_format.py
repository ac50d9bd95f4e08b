"""How the HTML report writes a value: metrics (rates as percentages, counts with separators,
other numbers to four significant digits), signed deltas, rate changes in percentage points,
durations and timestamps. `flowkit.inspect.report` builds the page's data with these.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any

from flowkit.inspect.trace_view import fold

_RATE = re.compile(r"(^|_)rate($|[_@])|percentage$")
"""Metric keys that hold a rate, shown as a percentage."""


def format_metric(name: str, value: Any) -> str:
    """A metric as the cards show it: rates as percentages, counts with separators, other
    numbers to four significant digits."""
    key = name.rpartition(".")[2]
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (int, float)) and _RATE.search(key):
        return f"{value:.1%}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return fold(value, 80)


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4g}"


def _rate_points(value: float | None) -> str:
    """A change of a rate, in percentage points (the rates show as percentages)."""
    return "—" if value is None else f"{value * 100:+.1f} pp"


def _plain(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.2f} s"
    minutes, secs = divmod(round(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s"


def _when(iso: str | None) -> str:
    if not iso:
        return "—"
    try:
        moment = datetime.fromisoformat(iso).astimezone(timezone.utc)
    except ValueError:
        return iso
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
