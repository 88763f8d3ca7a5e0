"""Where the CPU goes while one side of a comparison runs (Linux /proc only).

The benchmark prints it beside each round of the layouts and s3 sections: a run
that keeps every core busy is bound by the CPU it spends, so the seconds each
party used (this process, its children, a daemon, a server's process group) and
the machine's idle time tell what bounds it.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def machine() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine since boot, all cores."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    return (user + nice + system + irq + softirq + steal) / _TICK, (idle + iowait) / _TICK


def process(pid: int) -> float:
    """User + system CPU seconds of the live process ``pid`` (all its threads); 0 once
    it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def group(pgid: int) -> float:
    """CPU seconds of the live processes of process group ``pgid`` (a forking server)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _rusage(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Usage:
    """CPU seconds used between ``start`` and ``stop``: by this process, by the
    children it waited for, by the ``pid`` and process group ``pgid`` watched (0 when
    none), and by the whole machine (busy and idle, all cores)."""

    own: float = 0.0
    children: float = 0.0
    watched: float = 0.0
    server: float = 0.0
    busy: float = 0.0
    idle: float = 0.0

    def describe(self, own: str | None, watched: str | None, children: str | None) -> str:
        """One line; each named party with its seconds, then the server and machine."""
        parts = [
            f"{name} {seconds:.2f}"
            for name, seconds in (
                (own, self.own),
                (watched, self.watched),
                (children, self.children),
            )
            if name
        ]
        parts.append(f"server {self.server:.2f}")
        parts.append(f"machine busy {self.busy:.2f}, idle {self.idle:.2f}")
        return "CPU s: " + ", ".join(parts)


class Meter:
    """Measures a stretch of time: ``start()``, run it, ``stop()`` -> Usage."""

    def __init__(self, pid: int | None = None, pgid: int | None = None) -> None:
        self.pid = pid
        self.pgid = pgid
        self._begin: Usage | None = None

    def _now(self) -> Usage:
        busy, idle = machine()
        return Usage(
            own=_rusage(resource.RUSAGE_SELF),
            children=_rusage(resource.RUSAGE_CHILDREN),
            watched=process(self.pid) if self.pid else 0.0,
            server=group(self.pgid) if self.pgid else 0.0,
            busy=busy,
            idle=idle,
        )

    def start(self) -> None:
        self._begin = self._now()

    def stop(self) -> Usage:
        assert self._begin is not None, "stop() before start()"
        end, begin = self._now(), self._begin
        return Usage(*(getattr(end, f) - getattr(begin, f) for f in Usage.__dataclass_fields__))
