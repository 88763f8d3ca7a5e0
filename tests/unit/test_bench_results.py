"""The benchmark's results (bench/results.py): a missed figure is printed with what
bounds it, in the summary and beside the figure; a met one is not."""

from __future__ import annotations

import pytest

from bench.results import Result, below, cpu_per_mib, print_result, print_table, versus


def test_a_missed_ratio_carries_its_bound_to_the_summary(capsys: pytest.CaptureFixture) -> None:
    missed = versus("tiles vs tensorstore", 900.0, 1000.0, "MiB/s", 1.0, "CPU bound 950 MiB/s")
    met = versus("tiles vs zarr-python", 900.0, 450.0, "MiB/s", 1.5, "never shown")
    assert not missed.passed and met.passed
    print_table([missed, met], {})
    out = capsys.readouterr().out
    summary = out.split("what bounds each missed figure")[1]
    assert "tiles vs tensorstore: CPU bound 950 MiB/s" in summary
    assert "never shown" not in out


def test_a_miss_without_a_measured_bound_says_so(capsys: pytest.CaptureFixture) -> None:
    print_table([below("listing", 3.0, "s", 2.0)], {})
    assert "listing: no bound measured" in capsys.readouterr().out


def test_all_met_prints_no_bounds(capsys: pytest.CaptureFixture) -> None:
    print_table([below("listing", 1.0, "s", 2.0, bound="x")], {})
    assert "what bounds" not in capsys.readouterr().out


def test_a_figure_line_shows_the_bound_only_when_missed(capsys: pytest.CaptureFixture) -> None:
    print_result(Result("a", "1 s", "-", None, "< 0.5 s", False, "the ceiling 0.4 s"))
    print_result(Result("b", "1 s", "-", None, "< 2 s", True, "hidden"))
    out = capsys.readouterr().out
    assert "bound: the ceiling 0.4 s" in out and "hidden" not in out


@pytest.mark.parametrize(
    ("seconds", "mb", "text"),
    [(1.0, 1000.0, "zarrfs 1.00 ms CPU/MiB"), (0.5, 512.0, "zarrfs 0.98 ms CPU/MiB")],
)
def test_cpu_per_mib(seconds: float, mb: float, text: str) -> None:
    assert cpu_per_mib("zarrfs", seconds, mb) == text
