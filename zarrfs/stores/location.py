"""The STORE argument: which store a location names, and opening it.

    /data/x.zarr           a directory (DirectoryStore)
    /data/x.zip            a .zip archive in zarr-python's ZipStore layout (read-only)
    http(s)://host/x.zarr  a store served over HTTP (read-only, not listable)
    s3://bucket/prefix     S3 or an S3-compatible server (options, AWS_*, ~/.aws)
    gs://bucket/prefix     Google Cloud Storage (GOOGLE_APPLICATION_CREDENTIALS; gcs://)
    az://container/prefix  Azure Blob Storage (AZURE_STORAGE_*; abfs://, abfss://)

Remote stores are opened lazily by the caller that will use them: their clients
run threads of their own, which a fork (the detaching daemon) would not keep.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from zarrfs.errors import ZarrfsError
from zarrfs.stores.base import Store

T = TypeVar("T")


class StoreOpenError(ZarrfsError):
    """The STORE argument cannot be opened as a Zarr store."""


@dataclass(frozen=True)
class StoreOptions:
    """What the command line says of the store; S3's settings win over the
    environment and the AWS config files ("": not said)."""

    anonymous: bool = False  # S3: unsigned requests (public buckets)
    endpoint_url: str = ""  # S3: the server (an S3-compatible one), http(s)://host[:port]
    region: str = ""  # S3
    profile: str = ""  # S3: the profile of ~/.aws/config and ~/.aws/credentials

    def s3_only(self) -> list[str]:
        """The options given that only an S3 store takes, as ``--name``."""
        given = [
            ("endpoint-url", self.endpoint_url),
            ("region", self.region),
            ("profile", self.profile),
        ]
        return [f"--{name}" for name, value in given if value]


def kind(location: str) -> str:
    """ "s3", "gs", "az", "http", "zip" or "directory" (by form alone, nothing is
    opened)."""
    lowered = location.lower()
    if lowered.startswith("s3://"):
        return "s3"
    if lowered.startswith(("gs://", "gcs://")):
        return "gs"
    if lowered.startswith(("az://", "abfs://", "abfss://")):
        return "az"
    if lowered.startswith(("http://", "https://")):
        return "http"
    if lowered.endswith(".zip") and not os.path.isdir(location):
        return "zip"
    return "directory"


def is_remote(location: str) -> bool:
    return kind(location) in ("s3", "gs", "az", "http")


def open_store(location: str, options: StoreOptions | None = None) -> Store:
    """The store ``location`` names, checked to be there; StoreOpenError (one line)
    otherwise."""
    options = options or StoreOptions()
    form = kind(location)
    if form != "s3" and options.s3_only():
        # Said at once: an option that does nothing would hide a mistyped STORE. The
        # location is not quoted: an HTTP URL may carry a token.
        named = " and ".join(options.s3_only())
        what = {
            "http": "an HTTP URL",
            "zip": "a .zip archive",
            "gs": "a Google Cloud Storage bucket",
            "az": "an Azure container",
        }.get(form, "a directory")
        raise StoreOpenError(f"{named}: for s3:// stores only, and the store is {what}")
    if form == "s3":
        from zarrfs.stores.s3 import S3Store

        def s3() -> Store:
            return S3Store(
                location,
                anonymous=options.anonymous,
                endpoint_url=options.endpoint_url,
                region=options.region,
                profile=options.profile,
            )

        store: Store = _opened(s3, location)
    elif form == "gs":
        from zarrfs.stores.gcs import GcsStore

        store = _opened(lambda: GcsStore(location, anonymous=options.anonymous), location)
    elif form == "az":
        from zarrfs.stores.azure import AzureStore

        store = _opened(lambda: AzureStore(location, anonymous=options.anonymous), location)
    elif form == "http":
        from zarrfs.stores.http import HttpStore

        store = _opened(lambda: HttpStore(location), location)
    elif form == "zip":
        if not os.path.lexists(location):  # anything else ZipStore refuses, saying why
            raise StoreOpenError(f"store {location!r} does not exist")
        from zarrfs.stores.zipstore import ZipStore

        return _opened(lambda: ZipStore(location), location)
    else:
        if not os.path.exists(location):
            raise StoreOpenError(f"store {location!r} does not exist")
        if not os.path.isdir(location):
            raise StoreOpenError(f"store {location!r} is not a directory or a .zip archive")
        if not os.access(location, os.R_OK | os.X_OK):
            raise StoreOpenError(f"store {location!r} is not readable")
        from zarrfs.stores.directory import DirectoryStore

        return DirectoryStore(location)
    check = getattr(store, "check", None)
    if check is not None:
        _opened(check, location)
    return store


def _opened(make: Callable[[], T], location: str) -> T:
    try:
        return make()
    except StoreOpenError:
        raise
    except ZarrfsError as e:
        raise StoreOpenError(str(e)) from None
