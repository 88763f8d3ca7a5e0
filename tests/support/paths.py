"""Where the tests find the repository, its example store and the conformance corpus."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_STORE = REPO / "data" / "example.zarr"
CORPUS = REPO / "tests" / "corpus"  # tests/corpus/README.md says who wrote what
