from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_STORE = REPO / "data" / "example.zarr"
CORPUS = REPO / "tests" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The conformance corpus (tests/corpus/README.md); its absence is a failure, not a skip."""
    assert (CORPUS / "expected.json").is_file(), f"corpus not found at {CORPUS}"
    return CORPUS


@pytest.fixture(scope="session")
def example_store() -> Path:
    return EXAMPLE_STORE
