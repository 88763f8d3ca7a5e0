#!/usr/bin/env bash
# Install everything (scripts/install.sh), lint, then run the whole test suite.
# Extra arguments go to pytest, e.g.: bash scripts/test.sh -k npy -x
# Exit status: non-zero if linting fails, otherwise pytest's.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install.sh

echo "test: ruff check zarrfs tests scripts bench"
.venv/bin/ruff check zarrfs tests scripts bench

echo "test: pytest -v $*"
exec .venv/bin/python -m pytest -v "$@"
