"""A store backed by a local directory: one file per key."""

from __future__ import annotations

import errno
import os

from zarrfs.errors import StoreError
from zarrfs.stores.base import Listing, Store

_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)


class DirectoryStore(Store):
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def describe(self) -> str:
        return self.root

    def _path(self, key: str) -> str:
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise StoreError(f"invalid key {key!r}", errno.EINVAL)
        return os.path.join(self.root, *parts)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError as e:
            if e.errno in _MISSING:
                return None
            raise StoreError(f"reading {key!r}: {e.strerror}", e.errno or errno.EIO) from e

    def contains(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def list_dir(self, prefix: str) -> Listing:
        keys: list[str] = []
        prefixes: list[str] = []
        try:
            with os.scandir(self._path(prefix)) as it:
                for entry in it:
                    try:
                        if entry.is_dir():
                            prefixes.append(entry.name)
                        elif entry.is_file():
                            keys.append(entry.name)
                    except OSError:
                        continue
        except OSError as e:
            if e.errno in _MISSING:
                return Listing((), ())
            raise StoreError(f"listing {prefix!r}: {e.strerror}", e.errno or errno.EIO) from e
        return Listing(tuple(sorted(keys)), tuple(sorted(prefixes)))

    def mtime(self, key: str) -> float | None:
        try:
            return os.stat(self._path(key)).st_mtime
        except OSError:
            return None

    def statvfs(self) -> tuple[int, int, int] | None:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_frsize, st.f_blocks, st.f_bavail
