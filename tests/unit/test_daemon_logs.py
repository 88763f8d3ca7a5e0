"""The suite's check of daemon logs (tests/support/daemon_logs.py), run on small test
files by a pytest of their own: a traceback or an internal error in a watched log fails
the test unless it declares it, and only tests marked ``mount`` may start daemons."""

from __future__ import annotations

import pytest

from tests.support.daemon_logs import records
from tests.support.paths import REPO

RECORD = "2025-01-02 03:04:05,678 zarrfs[42] {level} zarrfs.fuse.operations: {message}"
TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in read\nKeyError: 7'

TESTS = f"""
import pytest
from tests.support import daemon_logs

INTERNAL = {RECORD.format(level="ERROR", message="internal error in read")!r}
TRACEBACK = {TRACEBACK!r}
FINE = {RECORD.format(level="INFO", message="mounted")!r}


def log(tmp_path, *lines):
    path = tmp_path / "daemon.log"
    daemon_logs.watch(path)
    path.write_text("\\n".join(lines) + "\\n")


@pytest.mark.mount
def test_fine(tmp_path):
    log(tmp_path, FINE)


@pytest.mark.mount
def test_internal_error(tmp_path):
    log(tmp_path, FINE, INTERNAL, TRACEBACK, FINE)


@pytest.mark.mount
@pytest.mark.daemon_log_allows(r"internal error in read")
def test_internal_error_allowed(tmp_path):
    log(tmp_path, INTERNAL, TRACEBACK)


@pytest.mark.mount
@pytest.mark.daemon_log_allows(r"internal error in write")
def test_another_error_allowed(tmp_path):
    log(tmp_path, INTERNAL, TRACEBACK)


@pytest.mark.mount
def test_a_crash_without_a_log_line(tmp_path):
    log(tmp_path, TRACEBACK)


def test_not_marked_mount(tmp_path):
    log(tmp_path, FINE)
"""


def test_records_hold_their_tracebacks() -> None:
    fine = RECORD.format(level="INFO", message="mounted")
    internal = RECORD.format(level="ERROR", message="internal error in read")
    text = f"{fine}\n{internal}\n{TRACEBACK}\n{fine}\n"
    assert list(records(text)) == [fine, f"{internal}\n{TRACEBACK}", fine]
    assert list(records(f"{TRACEBACK}\n{fine}\n")) == [TRACEBACK, fine]
    assert list(records("")) == []


def test_undeclared_tracebacks_fail_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_logs=TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.daemon_logs", "-p", "no:cacheprovider", "-W", "ignore"
    )
    result.assert_outcomes(passed=2, failed=4)
    failed = {line.split()[1] for line in result.outlines if line.startswith("FAILED ")}
    assert failed == {
        "test_logs.py::test_internal_error",
        "test_logs.py::test_another_error_allowed",
        "test_logs.py::test_a_crash_without_a_log_line",
        "test_logs.py::test_not_marked_mount",
    }
    result.stdout.fnmatch_lines(["*a zarrfs daemon logged 1 traceback(s) or internal error*"])
    result.stdout.fnmatch_lines(["*test_not_marked_mount starts a zarrfs daemon*"])


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The inner pytest imports tests.support from this checkout."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return pytester
