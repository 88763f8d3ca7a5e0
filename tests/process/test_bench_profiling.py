"""The benchmark's profiles (bench/profiling.py): ``--profile`` records a process with
perf while a measured region runs, and prints the largest shares beside it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import profiling

REPORT = """\
# Samples: 5K of event 'cpu-clock:ppp'
#
    46.78%  [kernel.kallsyms]
    22.94%  libpython3.11.so.1.0
     0.12%  libfuse3.so.3.17.2

"""


def test_top_lines_are_the_share_lines_in_order() -> None:
    assert profiling.top_lines(REPORT) == [
        "46.78% [kernel.kallsyms]",
        "22.94% libpython3.11.so.1.0",
        "0.12% libfuse3.so.3.17.2",
    ]


@pytest.fixture
def busy() -> Iterator[int]:
    """A process spinning in Python, stopped after the test."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_a_profiled_region_is_recorded_and_summed_up(
    tmp_path: Path, busy: int, capsys: pytest.CaptureFixture
) -> None:
    profiling.enable(tmp_path / "profiles")
    try:
        for _ in range(2):  # a second round of the same name gets a file of its own
            with profiling.profiled(busy, "read shards v3"):
                time.sleep(0.5)
    finally:
        profiling._directory.clear()
    out = capsys.readouterr().out
    report = tmp_path / "profiles" / "read-shards-v3.txt"
    assert (tmp_path / "profiles" / "read-shards-v3-2.perf.data").exists()
    text = report.read_text()
    assert "by dso:" in text and "libpython" in text  # where a Python loop spends its time
    assert f"profile of read shards v3 ({report})" in out and "by sym:" in out


def test_nothing_is_recorded_unless_enabled(tmp_path: Path, busy: int) -> None:
    assert not profiling.enabled()
    with profiling.profiled(busy, "quiet"):
        pass
    assert not list(tmp_path.iterdir())
