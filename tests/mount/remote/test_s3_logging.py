"""What reaches zarrfs's log from an S3 mount at ``--log-level debug``: never a
secret key, session token, signature or Authorization header, whether they come
from an AWS profile (an assumed role: botocore asks STS, and logs at DEBUG the
request it signs and the answer holding the credentials) or echoed by a server's
error page."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.mounting import mounted
from tests.support.servers import Bucket, LoopbackS3
from zarrfs.errors import StoreError
from zarrfs.stores.s3 import S3Store

SOURCE_KEY = "AKIAZARRFSSOURCEKEY1"
SOURCE_SECRET = "zArRfSsOuRcEsEcReT0123456789abcdefghijkl"
# What must not appear: names of the secret fields, and the makings of a signature.
LEAKS = re.compile(
    r"SecretAccessKey|SessionToken|aws_secret_access_key|Signature|StringToSign"
    r"|Authorization|AWS4-HMAC-SHA256 Credential|X-Amz-Security-Token|" + SOURCE_SECRET,
    re.IGNORECASE,
)


def assume_role_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS_PROFILE naming a role assumed with a source profile's keys (STS is the
    same moto server: AWS_ENDPOINT_URL serves every service)."""
    config = tmp_path / "aws-config"
    config.write_text(
        "[profile zarrfs-role]\nrole_arn = arn:aws:iam::123456789012:role/zarrfs\n"
        "source_profile = zarrfs-source\nregion = us-east-1\n"
    )
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        f"[zarrfs-source]\naws_access_key_id = {SOURCE_KEY}\n"
        f"aws_secret_access_key = {SOURCE_SECRET}\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_PROFILE", "zarrfs-role")


def test_a_profile_with_an_assumed_role_at_debug_level(
    s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "local"
    zarr.open_group(str(local), mode="w").create_array("a", data=np.arange(100, dtype="<i4"))
    for path in sorted(local.rglob("*")):
        if path.is_file():
            s3_bucket.put(f"s.zarr/{path.relative_to(local)}", path.read_bytes())
    assume_role_profile(tmp_path, monkeypatch)
    with mounted(f"s3://{s3_bucket.name}/s.zarr", "--log-level", "debug") as m:
        raw = m.path / "a" / "array.raw"
        assert raw.read_bytes() == np.arange(100, dtype="<i4").tobytes()
        raw.write_bytes(np.zeros(100, "<i4").tobytes())
    log = m.log()
    assert "DEBUG" in log  # the level was on
    assert not LEAKS.findall(log), LEAKS.findall(log)[:5]


def test_an_error_page_quoting_the_request_stays_out_of_the_log(
    loopback_s3: LoopbackS3,
) -> None:
    group = zarr.open_group(str(loopback_s3.root / "s.zarr"), mode="w")
    group.create_array("a", data=np.arange(100, dtype="<i4"))
    with mounted(loopback_s3.url("s.zarr"), "--log-level", "debug") as m:
        raw = m.path / "a" / "array.raw"
        assert os.path.getsize(raw) == 400
        loopback_s3.faults(echo_error={"match": "a/c/0"})
        with pytest.raises(OSError) as info:
            raw.read_bytes()
        assert info.value.errno == errno.EIO
        loopback_s3.faults(clear=True)
    log = m.log()
    assert "HTTP 400 InvalidRequest" in log
    assert not LEAKS.findall(log), LEAKS.findall(log)[:5]


def test_an_error_page_quoting_the_request_stays_out_of_the_message(
    loopback_s3: LoopbackS3,
) -> None:
    (loopback_s3.root / "p").mkdir()
    (loopback_s3.root / "p" / "k").write_bytes(b"v")
    store = S3Store(loopback_s3.url("p"))
    loopback_s3.faults(echo_error={})
    for call in (lambda: store.get("k"), lambda: store.set("k", b"w"), store.check):
        with pytest.raises(StoreError) as caught:
            call()
        text = f"{caught.value} {caught.value!r}"
        assert "HTTP 400" in text  # (a HEAD's answer has no body to name the code)
        assert not LEAKS.findall(text), text
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
