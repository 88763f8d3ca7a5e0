"""The store's settings as mount options (pure): ``-o endpoint_url=...,region=...,
profile=...,anonymous`` is ``--endpoint-url ... --region ... --profile ... --anonymous``;
no option carries a credential; the mount's source is the store without secrets."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from zarrfs.commands import mountopts
from zarrfs.commands.cli import cli
from zarrfs.commands.mount import mount_source
from zarrfs.stores.location import StoreOpenError, StoreOptions, open_store

OWN = mountopts.own_options(cli.commands["mount"])


@pytest.mark.parametrize(
    ("options", "args"),
    [
        ("endpoint_url=http://127.0.0.1:9000", ["--endpoint-url", "http://127.0.0.1:9000"]),
        ("endpoint_url=https://s3.example/base", ["--endpoint-url", "https://s3.example/base"]),
        ("region=eu-west-1", ["--region", "eu-west-1"]),
        ("profile=lab", ["--profile", "lab"]),
        ("anonymous", ["--anonymous"]),
        (
            "ro,endpoint_url=http://h:1,region=r,profile=p,anonymous",
            ["--read-only", "--endpoint-url", "http://h:1", "--region", "r", "--profile", "p",
             "--anonymous"],
        ),
    ],
)  # fmt: skip
def test_store_settings_are_mount_options(options: str, args: list[str]) -> None:
    translated = mountopts.translate(options.split(","), OWN)
    assert (translated.args, translated.fuse) == (args, [])


def test_the_fstab_form_keeps_them_and_names_the_store() -> None:
    args = ["s3://b/p", "/m", "-o", "ro,endpoint_url=http://h:1,region=r,profile=p"]
    assert mountopts.command_line(args, cli) == [
        "mount", "s3://b/p", "/m", "--read-only", "--endpoint-url", "http://h:1",
        "--region", "r", "--profile", "p", "-o", "fsname=s3://b/p",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "option",
    [
        "aws_secret_access_key=abc",
        "aws_access_key_id=AKIA",
        "aws_session_token=tok",
        "secret_key=abc",
        "access_key=abc",
        "session_token=abc",
        "password=abc",
        "passwd_file=/etc/passwd-s3fs",
        "credentials=/x",
        "key=abc",
        "AWS_SECRET_ACCESS_KEY=abc",
    ],
)
def test_credentials_are_refused_saying_where_they_go(option: str) -> None:
    with pytest.raises(mountopts.MountOptionError) as refused:
        mountopts.translate(["ro", option], OWN)
    message = refused.value.format_message()
    assert option.partition("=")[0] in message and "\n" not in message
    assert option.partition("=")[2] not in message.replace(option.partition("=")[0], "")
    assert "~/.aws/credentials" in message and "AWS_ACCESS_KEY_ID" in message


def test_generic_options_that_look_like_credentials_stay_generic() -> None:
    translated = mountopts.translate(["x-systemd.token_key=1", "comment=secret"], OWN)
    assert translated.ignored == ["x-systemd.token_key=1", "comment=secret"]


def check(callback: object, value: str) -> object:
    return callback(None, None, value)  # type: ignore[operator]


@pytest.mark.parametrize(
    "value", ["http://127.0.0.1:9000", "https://s3.example", "http://[::1]:9000/", "HTTP://h"]
)
def test_endpoint_urls_taken(value: str) -> None:
    assert check(mountopts.check_endpoint_url, value) == value


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("127.0.0.1:9000", "no http:// or https:// URL"),
        ("ftp://h", "no http:// or https:// URL"),
        ("http://", "no http:// or https:// URL"),
        ("http://h:port", "no valid port"),
        ("http://AKIA:topsecret@h:1", "carries no user info nor query string"),
        ("http://h:1/?X-Amz-Signature=topsecret", "carries no user info nor query string"),
        ("http://h:1/#topsecret", "carries no user info nor query string"),
    ],
)
def test_endpoint_urls_refused(value: str, says: str) -> None:
    with pytest.raises(click.BadParameter) as refused:
        check(mountopts.check_endpoint_url, value)
    assert says in refused.value.format_message()
    assert "topsecret" not in refused.value.format_message()


@pytest.mark.parametrize("value", ["us-east-1", "garage", "fr-par", "default", "ceph_zone.1"])
def test_regions_taken(value: str) -> None:
    assert check(mountopts.check_region, value) == value


@pytest.mark.parametrize("value", ["", "-x", "a b", "eu/west", "x" * 65])
def test_regions_refused(value: str) -> None:
    if not value:
        assert check(mountopts.check_region, value) == ""
        return
    with pytest.raises(click.BadParameter):
        check(mountopts.check_region, value)


@pytest.mark.parametrize("value", ["default", "lab", "my.profile", "team@acct", "sso-admin"])
def test_profiles_taken(value: str) -> None:
    assert check(mountopts.check_profile, value) == value


@pytest.mark.parametrize("value", ["a b", "-lab", "x\ny", "[lab]"])
def test_profiles_refused(value: str) -> None:
    with pytest.raises(click.BadParameter):
        check(mountopts.check_profile, value)


@pytest.mark.parametrize(
    ("store", "source"),
    [
        ("s3://bucket/prefix", "s3://bucket/prefix"),
        ("gs://bucket/prefix", "gs://bucket/prefix"),
        ("abfss://c@account.dfs.core.windows.net/p", "abfss://c@account.dfs.core.windows.net/p"),
        ("https://u:pw@h/x.zarr?token=t", "https://h/x.zarr"),
        ("/data/x.zarr", "/data/x.zarr"),
        ("/data/x.zip", "/data/x.zip"),
    ],
)
def test_the_mount_source_is_the_store_without_secrets(store: str, source: str) -> None:
    assert mount_source(store) == source


def test_a_relative_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert mount_source("x.zarr") == os.path.join(str(tmp_path), "x.zarr")
    assert mount_source("./a/../b.zarr") == os.path.join(str(tmp_path), "b.zarr")


@pytest.mark.parametrize("given", ["endpoint_url", "region", "profile"])
def test_s3_settings_on_another_store_are_refused(tmp_path: Path, given: str) -> None:
    options = StoreOptions(**{given: "x"})
    with pytest.raises(StoreOpenError) as refused:
        open_store(str(tmp_path), options)
    assert str(refused.value) == (
        f"--{given.replace('_', '-')}: for s3:// stores only, and the store is a directory"
    )
    with pytest.raises(StoreOpenError, match=r"the store is an HTTP URL$") as refused:
        open_store("http://u:pw@127.0.0.1:1/x?token=t", options)
    assert "pw" not in str(refused.value) and "token" not in str(refused.value)


def test_anonymous_is_ignored_by_other_stores(tmp_path: Path) -> None:
    assert open_store(str(tmp_path), StoreOptions(anonymous=True)).describe()
