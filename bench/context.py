"""``Bench``: what every section is given: the work directory, the sizes asked for on
the command line, and the data and read stores that several sections share (made
once, on first use)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.data import COLUMNS, MiB, create_array, make_data
from bench.mounting import Mounted, mounted

HOT_MB = 64  # the array of the random-read and random-write sections


@dataclass
class Bench:
    work: Path
    size_mb: int
    random_ops: int
    _data: np.ndarray | None = None
    _stores: dict[str, Path] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return self.size_mb * MiB // (COLUMNS * 4)

    @property
    def hot_rows(self) -> int:
        return min(self.size_mb, HOT_MB) * MiB // (COLUMNS * 4)

    def mount(self, store: Path | str, *options: str) -> AbstractContextManager[Mounted]:
        return mounted(store, *options, log_dir=self.work)

    def data(self) -> np.ndarray:
        """The read sections' array: smooth float32 with a little noise, --size-mb."""
        if self._data is None:
            self._data = make_data(self.rows, noise=0.01)
        return self._data

    def read_store(self, codec: str) -> Path:
        """A store whose ``arr`` holds ``data()`` with this codec (made once, shared)."""
        if codec not in self._stores:
            store = self.work / f"read-{codec}.zarr"
            create_array(store, self.rows, codec, self.data())
            self._stores[codec] = store
        return self._stores[codec]
