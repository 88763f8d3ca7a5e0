"""Where the time goes: ``python -m bench --profile DIR`` records the zarrfs daemon
with ``perf record -g`` while each of its measured reads, rewrites and listings runs,
and prints the shares of the largest libraries and functions beside the figure.

perf sees native frames: the interpreter's own (libpython), the codecs, libc's
copies and allocations, and the kernel's (FUSE copies, page faults, thread
switches), which is what separates two sides that decode with the same C
libraries. Each recording is kept in DIR with its report (``perf report --stdio``,
``--no-children``) for a closer look. Without ``--profile`` nothing here runs, and
nothing is slowed: perf attaches before a measured region starts.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.results import BenchError

FREQUENCY = 999  # samples per second and thread: a few thousand per measured second
ATTACH_SECONDS = 0.3  # perf's start, before the measured region
SHOWN = 8  # lines of each table printed beside the figure
REPORT = ("perf", "report", "--stdio", "--no-children", "-g", "none")

_directory: list[Path] = []  # the run's --profile DIR, when given
_names: dict[str, int] = {}  # recordings so far of each name (rounds: -2, -3...)


def enable(directory: Path) -> None:
    """Profile every measured region of this run into ``directory``."""
    if shutil.which("perf") is None:
        raise BenchError("--profile needs perf (Debian: linux-perf; scripts/install.sh)")
    directory.mkdir(parents=True, exist_ok=True)
    _directory[:] = [directory]


def enabled() -> bool:
    return bool(_directory)


@contextmanager
def profiled(pid: int, what: str) -> Iterator[None]:
    """Record process ``pid`` (all its threads) while the body runs, when enabled."""
    if not _directory:
        yield
        return
    name = _slug(what)
    _names[name] = _names.get(name, 0) + 1
    if _names[name] > 1:
        name = f"{name}-{_names[name]}"
    data = _directory[0] / f"{name}.perf.data"
    recorder = subprocess.Popen(
        ["perf", "record", "-F", str(FREQUENCY), "-g", "-p", str(pid), "-o", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(ATTACH_SECONDS)
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        try:
            recorder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()
    print(summary(data, what))


def summary(data: Path, what: str) -> str:
    """The report of one recording, written beside it; its top lines, indented."""
    if not data.exists():
        return f"      profile of {what}: perf recorded nothing"
    parts = []
    for sort in ("dso", "sym"):
        report = subprocess.run(
            [*REPORT, "-i", str(data), "--sort", sort],
            capture_output=True,
            text=True,
        )
        parts.append((sort, top_lines(report.stdout)))
    text_file = data.parent / (data.name.removesuffix(".perf.data") + ".txt")
    text_file.write_text("\n\n".join(f"by {sort}:\n" + "\n".join(lines) for sort, lines in parts))
    shown = [f"      profile of {what} ({text_file}):"]
    for sort, lines in parts:
        shown.append(f"        by {sort}: " + "; ".join(line.strip() for line in lines[:SHOWN]))
    return "\n".join(shown)


def top_lines(report: str) -> list[str]:
    """The sample-share lines of a ``perf report --stdio`` output, largest first."""
    lines = [line for line in report.splitlines() if re.match(r"\s*\d+\.\d+%", line)]
    return [re.sub(r"\s+", " ", line).strip() for line in lines]


def _slug(what: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", what).strip("-") or "profile"
