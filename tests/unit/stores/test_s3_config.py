"""Where the S3 store's endpoint, region and credentials come from (s3_config.resolve):
the option, else the environment, else the profile of the AWS config files, as the
AWS CLI reads them. Each test writes its own AWS files in a temporary directory and
points AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE (or HOME) at them; nothing of
the user's is read."""

from __future__ import annotations

import errno
import logging
import os
import pwd
from pathlib import Path

import pytest

from tests.support.servers import REGION, AuthServer
from zarrfs.errors import StoreError
from zarrfs.stores import s3_config
from zarrfs.stores.s3 import S3Store
from zarrfs.stores.s3_config import Settings, resolve
from zarrfs.stores.s3_errors import failure, host_of

URL = "s3://bucket/prefix"
AWS_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)

CONFIG = """\
[default]
region = eu-west-1
endpoint_url = http://default.example:9000

[profile lab]
region = lab-region
endpoint_url = http://lab.example:9000

[profile serviced]
region = us-west-2
endpoint_url = http://global.example:1
services = local

[services local]
s3 =
  endpoint_url = http://s3.local.example:7480

[profile bare]
output = json
"""

CREDENTIALS = """\
[default]
aws_access_key_id = AKIADEFAULT
aws_secret_access_key = default-secret

[lab]
aws_access_key_id = AKIALAB
aws_secret_access_key = lab-secret
"""


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment with no AWS variable, and AWS files in ``tmp_path/home/.aws``
    found through HOME (as the AWS CLI finds ~/.aws)."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "config").write_text(CONFIG)
    (home / ".aws" / "credentials").write_text(CREDENTIALS)
    monkeypatch.setenv("HOME", str(home))
    return home / ".aws"


def access_key(resolved: s3_config.Resolved) -> str | None:
    if resolved.provider is None:
        return None
    return str(resolved.provider.credentials.access_key)


def test_the_default_profile_gives_endpoint_region_and_keys(aws: Path) -> None:
    resolved = resolve(URL, Settings())
    assert (resolved.endpoint, resolved.scheme, resolved.region) == (
        "http://default.example:9000",
        "http",
        "eu-west-1",
    )
    assert access_key(resolved) == "AKIADEFAULT"
    assert resolved.store_config() == {
        "endpoint": "http://default.example:9000",
        "region": "eu-west-1",
    }


def test_aws_profile_and_the_profile_option_select_a_profile(
    aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "lab")
    resolved = resolve(URL, Settings())
    assert (resolved.endpoint, resolved.region, access_key(resolved)) == (
        "http://lab.example:9000",
        "lab-region",
        "AKIALAB",
    )
    monkeypatch.setenv("AWS_PROFILE", "default")
    resolved = resolve(URL, Settings(profile="lab"))  # the option wins over AWS_PROFILE
    assert (resolved.endpoint, access_key(resolved)) == ("http://lab.example:9000", "AKIALAB")


def test_the_services_section_comes_before_the_profiles_endpoint(aws: Path) -> None:
    resolved = resolve(URL, Settings(profile="serviced"))
    assert (resolved.endpoint, resolved.region) == ("http://s3.local.example:7480", "us-west-2")


def test_a_profile_without_endpoint_or_region_leaves_aws_defaults(aws: Path) -> None:
    resolved = resolve(URL, Settings(profile="bare"))
    assert (resolved.endpoint, resolved.scheme, resolved.region) == ("", "", "")
    assert resolved.store_config() == {}


def test_the_environment_wins_over_the_profile(aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env.example:1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "env-default")
    resolved = resolve(URL, Settings(profile="lab"))
    assert (resolved.endpoint, resolved.region) == ("http://env.example:1", "env-default")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://env-s3.example")
    monkeypatch.setenv("AWS_REGION", "env-region")
    resolved = resolve(URL, Settings(profile="lab"))
    assert (resolved.endpoint, resolved.scheme, resolved.region) == (
        "https://env-s3.example",
        "https",
        "env-region",
    )


def test_options_win_over_the_environment_and_the_profile(
    aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env.example:1")
    monkeypatch.setenv("AWS_REGION", "env-region")
    given = Settings(endpoint_url="https://option.example:8443/", region="opt-1", profile="lab")
    resolved = resolve(URL, given)
    assert (resolved.endpoint, resolved.scheme, resolved.region) == (
        "https://option.example:8443",
        "https",
        "opt-1",
    )
    assert resolved.origins == (
        "endpoint https://option.example:8443 (option)",
        "region opt-1 (option)",
    )


def test_keys_in_the_environment_come_before_the_profile_but_not_a_named_one(
    aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the AWS CLI: AWS_ACCESS_KEY_ID wins over the default profile's keys (obstore
    reads them itself), ``--profile`` wins over AWS_ACCESS_KEY_ID."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    resolved = resolve(URL, Settings())
    assert resolved.provider is None
    assert resolved.endpoint == "http://default.example:9000"  # config is still read
    assert access_key(resolve(URL, Settings(profile="lab"))) == "AKIALAB"
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert resolve(URL, Settings()).provider is None


def test_anonymous_reads_no_credentials_but_the_endpoint(aws: Path) -> None:
    resolved = resolve(URL, Settings(anonymous=True, profile="lab"))
    assert resolved.provider is None
    assert (resolved.endpoint, resolved.region) == ("http://lab.example:9000", "lab-region")


def test_aws_config_file_and_shared_credentials_file_are_honoured(
    aws: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config, credentials = tmp_path / "elsewhere-config", tmp_path / "elsewhere-credentials"
    config.write_text("[profile far]\nregion = far-1\nendpoint_url = http://far.example\n")
    credentials.write_text("[far]\naws_access_key_id = AKIAFAR\naws_secret_access_key = s\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    resolved = resolve(URL, Settings(profile="far"))
    assert (resolved.endpoint, resolved.region, access_key(resolved)) == (
        "http://far.example",
        "far-1",
        "AKIAFAR",
    )
    with pytest.raises(StoreError, match="'lab' not found"):
        resolve(URL, Settings(profile="lab"))  # ~/.aws/config is not read then


def test_without_home_the_home_directory_comes_from_passwd(
    aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mount(8) and systemd may start the daemon without HOME: ~ is then the user's
    home directory from the passwd database (/root for root)."""
    monkeypatch.delenv("HOME")
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert s3_config.aws_files() == (home / ".aws" / "config", home / ".aws" / "credentials")


def test_no_aws_files_and_no_profile_reads_nothing(
    aws: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "nowhere"))

    def load(url: str, name: str) -> None:
        raise AssertionError("a profile was read")

    monkeypatch.setattr(s3_config._Profile, "load", load)  # nor botocore imported
    resolved = resolve(URL, Settings())
    assert (resolved.endpoint, resolved.region, resolved.provider) == ("", "", None)


def test_where_the_settings_came_from_is_logged_at_debug(
    aws: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AWS_REGION", "env-region")
    with caplog.at_level(logging.DEBUG, logger="zarrfs"):
        S3Store(URL, profile="lab")
    assert (
        "s3://bucket/prefix: endpoint http://lab.example:9000 (profile 'lab'), "
        "region env-region (AWS_REGION)"
    ) in caplog.messages
    assert not any("lab-secret" in m or "AKIALAB" in m for m in caplog.messages)


@pytest.mark.parametrize(
    ("settings", "variables", "says"),
    [
        (Settings(profile="nobody"), {}, "AWS profile 'nobody' not found"),
        (Settings(), {"AWS_PROFILE": "nobody"}, "AWS profile 'nobody' not found"),
        (Settings(endpoint_url="ftp://h"), {}, "no http(s) URL"),
        (Settings(endpoint_url="http://u:pw@h"), {}, "carries user info or a query string"),
        (Settings(), {"AWS_ENDPOINT_URL": "http://h/?X-Amz-Signature=s"}, "query string"),
    ],
)
def test_refused_in_one_line(
    aws: Path,
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    variables: dict[str, str],
    says: str,
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(StoreError) as caught:
        resolve(URL, settings)
    message = str(caught.value)
    assert caught.value.errno == errno.EINVAL and says in message and "\n" not in message
    assert "pw" not in message and "X-Amz-Signature=s" not in message


def test_a_profile_endpoint_with_user_info_is_refused(aws: Path) -> None:
    (aws / "config").write_text("[default]\nendpoint_url = http://key:secret@h:1\n")
    with pytest.raises(StoreError) as caught:
        resolve(URL, Settings())
    assert "secret" not in str(caught.value)


def test_an_unparsable_config_file_is_one_line(aws: Path) -> None:
    (aws / "config").write_text("[default\nregion = x\n")
    with pytest.raises(StoreError) as caught:
        resolve(URL, Settings())
    assert caught.value.errno == errno.EINVAL and "\n" not in str(caught.value)


# -- the host a failure names -------------------------------------------------------------

# obstore's texts (0.12) of a refused connection and a timeout, cut short.
CONNECT = (
    "Generic S3 error: Error performing GET http://127.0.0.1:9/b?list-type=2 in 11ms, "
    "after 5 retries, max_retries: 5, retry_timeout: 10s  - HTTP error: error sending "
    "request\n\nDebug source:\n  HttpError {\n  kind: Connect,\n"
)
TIMEOUT = (
    "Generic S3 error: Error performing PUT https://bucket.s3.eu-west-1.amazonaws.com/k?"
    "X-Amz-Signature=abc in 30s, after 5 retries - HTTP error\n  kind: Timeout,\n"
)


@pytest.mark.parametrize(
    ("text", "host"),
    [
        (CONNECT, "127.0.0.1:9"),
        (TIMEOUT, "bucket.s3.eu-west-1.amazonaws.com"),
        ("Error performing HEAD http://[::1]:9000/b/k in 1s kind: Connect,", "[::1]:9000"),
        ("Error performing GET http://user:pw@h.example:1/b kind: Connect,", "h.example:1"),
        ("kind: Connect, and no URL", "the S3 server"),
    ],
)
def test_a_network_failure_names_the_host(text: str, host: str) -> None:
    assert host_of(Exception(text)) == host
    message = str(failure("reading", "s3://b/p/k", "b", Exception(text)))
    assert host in message and "\n" not in message
    assert "pw" not in message and "Signature" not in message


def test_connect_and_timeout_messages() -> None:
    connect = failure("checking", "s3://b/p", "b", Exception(CONNECT))
    assert str(connect) == "checking s3://b/p: cannot connect to 127.0.0.1:9 after 5 retries"
    timeout = failure("writing", "s3://b/p/k", "b", Exception(TIMEOUT))
    assert str(timeout) == (
        "writing s3://b/p/k: timed out waiting for bucket.s3.eu-west-1.amazonaws.com "
        "after 5 retries"
    )


# -- against a server that checks signatures ----------------------------------------------


def test_a_named_profile_signs_over_keys_in_the_environment(
    s3_auth_server: AuthServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The profile's keys are the ones used (the server refuses the environment's),
    and its endpoint and region, with no AWS_ENDPOINT_URL nor AWS_REGION."""
    server = s3_auth_server
    server.isolate(monkeypatch, tmp_path)
    server.client().put_object(Bucket=server.bucket, Key="cfg/zarr.json", Body=b"{}")
    for name in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONG")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    config, credentials = tmp_path / "config", tmp_path / "credentials"
    config.write_text(f"[profile lab]\nregion = {REGION}\nendpoint_url = {server.endpoint}\n")
    credentials.write_text(
        f"[lab]\naws_access_key_id = {server.access_key_id}\n"
        f"aws_secret_access_key = {server.secret}\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    store = S3Store(f"s3://{server.bucket}/cfg", profile="lab")
    assert store.get("zarr.json") == b"{}"
    with pytest.raises(StoreError) as caught:  # the environment's keys, refused
        S3Store(f"s3://{server.bucket}/cfg", endpoint_url=server.endpoint).get("zarr.json")
    assert caught.value.errno == errno.EACCES
    assert "wrong-secret" not in str(caught.value)
