"""Conditional writes of the S3 store through a real mount: a PUT held past its timeout
fails its fsync with EIO, and when it reaches the server late it never replaces what
the next fsync stored."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import zarr

from tests.support.mounting import mounted
from tests.support.servers import LoopbackS3


@pytest.mark.usefixtures("short_s3_timeout")
def test_write_fsync_eio_write_fsync_then_the_held_put_arrives(loopback_s3: LoopbackS3) -> None:
    """write A, fsync -> EIO (the server held the PUT past the client's timeout),
    write B, fsync -> 0, then the held PUT of A reaches the server: B stays."""
    group = zarr.open_group(str(loopback_s3.root / "s.zarr"), mode="w")
    group.create_array("plain", shape=(8, 4), chunks=(4, 4), dtype="<f4", fill_value=0)[...] = 1
    a = np.full((4, 4), 2, "<f4")
    b = np.full((4, 4), 3, "<f4")
    with mounted(loopback_s3.url("s.zarr"), "--flush-interval", "3600") as m:
        fd = os.open(m.path / "plain" / "array.raw", os.O_RDWR)
        try:
            loopback_s3.faults(hold_put={"match": "plain/c/0/0"})
            os.pwrite(fd, a.tobytes(), 0)
            with pytest.raises(OSError) as info:
                os.fsync(fd)
            assert info.value.errno == errno.EIO
            held = loopback_s3.counters()["held"]
            loopback_s3.faults(drop=["hold_put"])
            os.pwrite(fd, b.tobytes(), 0)
            os.fsync(fd)
            loopback_s3.faults(release=True)
            outcomes = loopback_s3.wait_for("late_outcomes", held)["late_outcomes"]
            assert outcomes == [412] * held
        finally:
            os.close(fd)
    stored = zarr.open_array(str(loopback_s3.root / "s.zarr" / "plain"), mode="r")
    expected = np.ones((8, 4), "<f4")
    expected[:4] = 3
    np.testing.assert_array_equal(stored[...], expected)
