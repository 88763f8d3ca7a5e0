"""The mounts on a path, read from /proc/self/mountinfo: never a stat, which would hang
on a deadlocked mount or fail on a dead one. The tests' own parser: cleanup and checks
must not depend on the code under test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    """A mount as /proc/self/mountinfo shows it."""

    options: set[str]  # per mount: ro, nosuid, ...
    fstype: str
    source: str
    super_options: set[str]  # the filesystem's: allow_other, ...
    device: str  # major:minor


def _unescape(field: str) -> str:
    return field.replace("\\040", " ")


def entries(path: str | Path) -> list[Entry]:
    """Every mount on ``path``, the newest last."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if _unescape(fields[4]) != str(path) or "-" not in fields[6:]:
                continue
            rest = fields[fields.index("-", 6) + 1 :]
            options, super_options = set(fields[5].split(",")), set(rest[2].split(","))
            found.append(Entry(options, rest[0], _unescape(rest[1]), super_options, fields[2]))
    return found


def mount_entry(path: str | Path) -> tuple[str, str] | None:
    """(device, fstype) of the newest mount on ``path``, None if nothing is mounted."""
    found = entries(path)
    return (found[-1].device, found[-1].fstype) if found else None
