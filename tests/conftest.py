"""What every test gets: the helpers of tests/support that hold fixtures (registered
as plugins), the corpus and the example store, and the ``mount`` marker, given by
folder: every test under tests/mount and tests/process runs zarrfs as a process (most
of them mount it), every other test calls zarrfs in-process and needs no FUSE."""

from __future__ import annotations

from pathlib import Path

import pytest

# Before any helper is imported, so that their asserts explain themselves too.
pytest.register_assert_rewrite("tests.support")

from tests.support.paths import CORPUS, EXAMPLE_STORE  # noqa: E402

pytest_plugins = (
    "pytester",  # tests/unit/test_daemon_logs.py runs pytest on small test files
    "tests.support.clouds",
    "tests.support.daemon_logs",
    "tests.support.fault_proxy",
    "tests.support.gcs_server",
    "tests.support.http_server",
    "tests.support.servers",
    "tests.support.writes",
    "tests.support.zips",
)

TESTS = Path(__file__).resolve().parent
MOUNT_FOLDERS = ("mount", "process")
collect_ignore = ["corpus"]  # data only: thousands of files no test is collected from


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.path.is_relative_to(TESTS / folder) for folder in MOUNT_FOLDERS):
            item.add_marker(pytest.mark.mount)


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The conformance corpus (tests/corpus/README.md); its absence is a failure, not a skip."""
    assert (CORPUS / "expected.json").is_file(), f"corpus not found at {CORPUS}"
    return CORPUS


@pytest.fixture(scope="session")
def example_store() -> Path:
    return EXAMPLE_STORE
