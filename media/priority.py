"""Work that may wait: a thread run only on its cores' idle time, so that it never delays speech."""

from __future__ import annotations

import contextlib
import os


def lower_thread(tid: int) -> None:
    """Run a thread only on the idle time of its cores (SCHED_IDLE), else at nice 10."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        return
    with contextlib.suppress(OSError):  # not permitted: keep the priority it has
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + 10)
