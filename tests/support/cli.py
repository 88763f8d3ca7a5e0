"""The zarrfs command run as a user runs it: in a subprocess, its output read whole.

An error must reach the user as one line ``zarrfs: error: ...`` on stderr with a
non-zero status, never a traceback."""

from __future__ import annotations

import functools
import subprocess

from tests.support.mounting import cap_address_space, zarrfs_command

PID_XATTR = "user.zarrfs.pid"  # the daemon's PID, on the mount's root directory


def run_cli(
    *args: str, timeout: float = 30, memory_limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``zarrfs *args``, within ``timeout`` seconds and, if given, an address space of
    ``memory_limit`` bytes (so that a regression fails instead of taking the machine)."""
    limit = None if memory_limit is None else functools.partial(cap_address_space, memory_limit)
    return subprocess.run(
        zarrfs_command(*args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=limit,
    )


def assert_one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    output = f"stdout: {result.stdout!r}\nstderr: {result.stderr!r}"
    assert result.returncode != 0, output
    assert "Traceback" not in result.stderr + result.stdout, output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("zarrfs: error:"), output
    for needle in needles:
        assert needle in lines[0], output
    return lines[0]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
