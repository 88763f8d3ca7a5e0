"""The kernel's table of mounts, /proc/self/mountinfo, read (pure parsing).

The daemon finds its mount's device there (to raise its read-ahead) and ``zarrfs
umount`` checks that a mount point is a zarrfs mount before it asks the daemon.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo."""

    device: str  # "major:minor"
    mountpoint: str
    fstype: str  # "fuse.zarrfs" for a zarrfs mount (its subtype)
    source: str


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(mountinfo: str) -> list[MountEntry]:
    entries = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        # id parent major:minor root mountpoint options [optional...] - fstype source super
        if "-" not in fields[6:]:
            continue
        rest = fields[fields.index("-", 6) + 1 :]
        if len(rest) < 2:
            continue
        entries.append(
            MountEntry(fields[2], _unescape(fields[4]), _unescape(rest[0]), _unescape(rest[1]))
        )
    return entries


def find_mount(mountpoint: str, mountinfo: str) -> MountEntry | None:
    """The newest (topmost) mount on ``mountpoint``: later lines were mounted later."""
    found = None
    for entry in parse_mountinfo(mountinfo):
        if entry.mountpoint == mountpoint:
            found = entry
    return found


def mount_device(mountpoint: str, mountinfo: str) -> str | None:
    """The "major:minor" of the newest mount on ``mountpoint`` in /proc/self/mountinfo."""
    entry = find_mount(mountpoint, mountinfo)
    return entry.device if entry is not None else None
