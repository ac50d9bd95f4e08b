"""A full disk under a run folder: the run stops, is marked interrupted, and says why.

When the disk is full even run.json cannot be rewritten to say so. So a run keeps a little
space in hand: its lock file is padded to ``RESERVE`` bytes when the run starts, and emptied
the moment a write fails for lack of space, which leaves room to close the files and record
the run's status honestly.
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path
from typing import BinaryIO

from flowkit.errors import FlowkitError

RESERVE = 64 * 1024
"""Bytes held back for the last writes: the rows' buffered tail, metrics.json and run.json."""


def no_space(err: BaseException) -> bool:
    """Whether ``err`` is a write refused because the disk (or the user's quota) is full."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def hold(lock: BinaryIO | None) -> None:
    """Pad the lock file to the reserve; a disk already too full for it just has none."""
    if lock is None:
        return
    with contextlib.suppress(OSError):
        lock.seek(0)
        lock.write(b"\0" * RESERVE)
        lock.flush()


def give_back(lock: BinaryIO | None) -> None:
    """Free the reserve (the lock itself is kept)."""
    if lock is not None:
        with contextlib.suppress(OSError, ValueError):
            lock.truncate(0)


class OutOfSpace(FlowkitError):
    """A write to the run folder found the disk full: the run is marked interrupted."""

    exit_code = 1

    def __init__(self, run_dir: Path) -> None:
        super().__init__(
            f"no space left on the device holding run folder {str(run_dir)!r}: the run "
            "stopped and is marked interrupted; the rows written before are kept",
            hint=f"free some space, then finish it with `flowkit run --resume {run_dir}`",
        )
        self.run_dir = run_dir
