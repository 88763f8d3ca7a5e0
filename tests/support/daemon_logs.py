"""A test fails when a zarrfs daemon it started logged a traceback or an internal error,
unless the test declares that it expects one:

    @pytest.mark.daemon_log_allows(r"internal error in read")

Each pattern is searched (``re.search``) in every suspicious record: a log line with the
lines that continue it (its traceback). What no pattern matches fails the test: after
its body when the body passed, else as a note on its failure; what the daemon logs while
the test's fixtures are torn down (a module's mount unmounting) fails the teardown.

``tests.support.mounting.mounted`` watches the log of every daemon it starts; a test that
starts one another way (``zarrfs mount`` detaching, mount(8)) calls ``watch`` with the
log file it gave the daemon (daemons that log to syslog are not watched). Only tests
marked ``mount`` (tests/mount, tests/process) may start daemons, so that the marker says
which tests need FUSE.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SUSPICIOUS = re.compile(r"Traceback \(most recent call last\)|internal error")
# A record of zarrfs's log format (zarrfs.commands.cli.LOG_FORMAT) begins with its time.
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", re.M)
MARKER = "daemon_log_allows"


@dataclass
class _Log:
    path: Path
    until_ended: bool  # watched across tests until ``ended``, else until the test ends
    checked: int = 0  # bytes of the file already checked
    ended: bool = False  # its daemon is gone: dropped once checked

    def unread(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.checked)
                data = f.read()
        except FileNotFoundError:
            return ""
        # Only whole lines: the daemon may be writing the rest of the last one.
        end = data.rfind(b"\n") + 1 if not self.ended else len(data)
        self.checked += end
        return data[:end].decode(errors="replace")


_logs: list[_Log] = []
_running: list[pytest.Item] = []


def watch(path: str | Path, *, until_ended: bool = False) -> None:
    """Check the log file at ``path`` (it may not exist yet) when the running test ends,
    or with ``until_ended`` also after every later test until ``ended`` is called for
    it (a daemon a fixture keeps for several tests)."""
    if _running and _running[-1].get_closest_marker("mount") is None:
        raise AssertionError(
            f"{_running[-1].nodeid} starts a zarrfs daemon: tests that do live under "
            "tests/mount or tests/process, which are marked mount"
        )
    if all(log.path != Path(path) for log in _logs):
        _logs.append(_Log(Path(path), until_ended))


def ended(path: str | Path) -> None:
    """The daemon logging to ``path`` has exited: its log is checked one last time."""
    for log in _logs:
        if log.path == Path(path):
            log.ended = True


def records(text: str) -> Iterator[str]:
    """The log records in ``text``, each with the lines that continue it."""
    starts = [m.start() for m in RECORD.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    for start, end in zip(starts, [*starts[1:], len(text)]):
        if text[start:end].strip():
            yield text[start:end].rstrip("\n")


def unexpected(item: pytest.Item, *, test_ends: bool) -> list[str]:
    """The suspicious records logged since the last check that ``item`` did not allow."""
    allowed = [
        re.compile(pattern) for marker in item.iter_markers(MARKER) for pattern in marker.args
    ]
    found = []
    for log in list(_logs):
        for record in records(log.unread()):
            if SUSPICIOUS.search(record) and not any(p.search(record) for p in allowed):
                found.append(f"{log.path}:\n{record}")
        if log.ended or (test_ends and not log.until_ended):
            _logs.remove(log)
    return found


def _message(found: list[str]) -> str:
    return (
        f"a zarrfs daemon logged {len(found)} traceback(s) or internal error(s) the test "
        f"does not allow (@pytest.mark.{MARKER}(regex)):\n\n" + "\n\n".join(found)
    )


def _check(item: pytest.Item, *, test_ends: bool) -> Generator[None, object, object]:
    try:
        result = yield
    except BaseException as e:
        found = unexpected(item, test_ends=test_ends)
        if found:
            e.add_note(_message(found))
        raise
    found = unexpected(item, test_ends=test_ends)
    if found:
        raise AssertionError(_message(found))
    return result


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*patterns): the daemons this test starts may log tracebacks or internal "
        "errors that match one of these regular expressions",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _check(item, test_ends=False))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _check(item, test_ends=True))
