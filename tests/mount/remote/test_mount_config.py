"""An S3 store (moto checking signatures, tests/support/servers.py) mounted with no AWS
variable in the environment: configured only by the AWS files (a temporary HOME with
.aws/config holding endpoint_url and region, .aws/credentials holding the keys) and by
mount options, with ``zarrfs mount`` and with mount(8) (an fstab line, ``mount -t``).
The mount's source (/proc/mounts, findmnt) is the store URL; no key or secret shows
there, nor in any command line. Every mount is unmounted in a ``finally``; a daemon
still running after its unmount is killed by its PID."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support import daemon_logs
from tests.support.cli import PID_XATTR, alive, assert_one_error_line
from tests.support.mountinfo import entries
from tests.support.mounting import unmount, zarrfs_command
from tests.support.servers import REGION, AuthServer, free_port
from zarrfs.daemon import runstate

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

DATA = np.arange(16 * 8, dtype="<f4").reshape(16, 8)
MINIMAL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # as mount(8) gives its helpers


@dataclass
class Setup:
    server: AuthServer
    url: str  # s3://bucket/prefix
    aws: Path  # the .aws directory of ``home``
    env: dict[str, str]  # zarrfs's environment: no AWS_* variable, HOME the temporary one
    dead: str  # an endpoint where nothing answers: "127.0.0.1:PORT"

    def secrets(self) -> list[bytes]:
        return [self.server.secret.encode(), self.server.access_key_id.encode()]


def aws_files(aws: Path, server: AuthServer, dead: str) -> None:
    """Profiles: ``default`` (endpoint_url and region), ``lab`` (the endpoint in a
    services section), ``dead`` (an endpoint where nothing answers); keys for each."""
    aws.mkdir(parents=True)
    (aws / "config").write_text(
        f"[default]\nregion = {REGION}\nendpoint_url = {server.endpoint}\n\n"
        f"[profile lab]\nregion = {REGION}\nservices = lab-services\n\n"
        f"[services lab-services]\ns3 =\n  endpoint_url = {server.endpoint}\n\n"
        f"[profile dead]\nregion = {REGION}\nendpoint_url = http://{dead}\n"
    )
    keys = (
        f"aws_access_key_id = {server.access_key_id}\naws_secret_access_key = {server.secret}\n"
    )
    profiles = ("default", "lab", "dead")
    (aws / "credentials").write_text("".join(f"[{p}]\n{keys}\n" for p in profiles))


@pytest.fixture
def setup(s3_auth_server: AuthServer, tmp_path: Path) -> Setup:
    server = s3_auth_server
    prefix = f"cfg-{uuid.uuid4().hex[:12]}/s.zarr"
    local = tmp_path / "local.zarr"
    zarr.open_group(str(local), mode="w").create_array(
        "a", shape=DATA.shape, chunks=(8, 8), dtype="<f4"
    )[...] = DATA
    s3 = server.client()
    for path in sorted(local.rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(local)}"
            s3.put_object(Bucket=server.bucket, Key=key, Body=path.read_bytes())
    home = tmp_path / "home"
    dead = f"127.0.0.1:{free_port()}"
    aws_files(home / ".aws", server, dead)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    return Setup(server, f"s3://{server.bucket}/{prefix}", home / ".aws", env, dead)


@pytest.fixture
def mnt(tmp_path: Path) -> Path:
    path = tmp_path / "mnt"
    path.mkdir()
    return path


def run(
    command: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def findmnt_source(mountpoint: Path) -> str:
    result = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE", "--mountpoint", str(mountpoint)],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def assert_no_secret_visible(setup: Setup, mountpoint: Path) -> None:
    """Neither key shows in /proc/mounts, findmnt or any process's command line."""
    seen = {"/proc/mounts": Path("/proc/mounts").read_bytes()}
    seen["findmnt"] = subprocess.run(["findmnt", "-n"], capture_output=True, check=True).stdout
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):  # ended meanwhile
                seen[f"/proc/{entry}/cmdline"] = Path(f"/proc/{entry}/cmdline").read_bytes()
    for where, text in seen.items():
        for word in setup.secrets():
            assert word not in text, f"{word!r} is in {where}"


def assert_mounted_store(setup: Setup, mountpoint: Path) -> None:
    [entry] = entries(mountpoint)
    assert entry.fstype == "fuse.zarrfs"
    assert entry.source == setup.url, entry
    assert findmnt_source(mountpoint) == setup.url
    assert (mountpoint / "a" / "array.raw").read_bytes() == DATA.tobytes()
    assert_no_secret_visible(setup, mountpoint)


@contextlib.contextmanager
def daemon_of(mountpoint: Path) -> Iterator[int | None]:
    """The PID of the daemon serving ``mountpoint`` (None if nothing is mounted);
    on exit the mount is gone and the daemon ended (killed by its PID at worst)."""
    pid = int(os.getxattr(mountpoint, PID_XATTR)) if entries(mountpoint) else None
    try:
        yield pid
    finally:
        unmount(mountpoint)
        if pid is not None:
            deadline = time.monotonic() + 30
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid) and str(mountpoint).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
            runstate.collect(pid, os.getuid())


# -- zarrfs mount -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "extra_env"),
    [
        ([], {}),  # ~/.aws: the default profile
        (["--profile", "lab"], {}),  # the endpoint of a services section
        (["-o", "ro,profile=lab"], {}),
        # the option wins over AWS_PROFILE and the environment's keys
        (["-o", "profile=lab"], {"AWS_PROFILE": "dead", "AWS_ACCESS_KEY_ID": "AKIAWRONG",
                                 "AWS_SECRET_ACCESS_KEY": "wrong"}),
        # options win over the profile's endpoint, and over the environment's
        (["--profile", "dead", "--endpoint-url", "{endpoint}"], {}),
        (["-o", "endpoint_url={endpoint},region=us-east-1"], {"AWS_ENDPOINT_URL": "http://{dead}"}),
    ],
    ids=["default-profile", "profile", "o-profile", "profile-over-env", "endpoint-over-profile",
         "endpoint-over-env"],
)  # fmt: skip
def test_zarrfs_mount_configured_by_aws_files_and_options(
    setup: Setup, mnt: Path, tmp_path: Path, args: list[str], extra_env: dict[str, str]
) -> None:
    fill = {"endpoint": setup.server.endpoint, "dead": setup.dead}
    args = [a.format(**fill) for a in args]
    env = {**setup.env, **{k: v.format(**fill) for k, v in extra_env.items()}}
    log = tmp_path / "daemon.log"
    daemon_logs.watch(log)
    result = run(zarrfs_command("mount", setup.url, str(mnt), "--log-file", str(log), *args), env)
    with daemon_of(mnt) as pid:
        assert result.returncode == 0, result.stderr
        assert pid is not None
        assert_mounted_store(setup, mnt)
        # zarrfs umount finds its mount by its type, whatever its source
        done = run(zarrfs_command("umount", str(mnt)), env)
        assert done.returncode == 0, done.stderr
        assert not entries(mnt)


def test_a_directory_store_shows_its_absolute_path(
    tmp_path: Path, mnt: Path, example_store: Path
) -> None:
    """``zarrfs mount`` of a relative path: the source is the absolute path; a given
    ``fsname`` wins."""
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "x.zarr").symlink_to(example_store)
    for options, source in (
        ([], str(tmp_path / "stores" / "x.zarr")),
        (["-o", "fsname=mine"], "mine"),
    ):
        log = tmp_path / "daemon.log"
        daemon_logs.watch(log)
        command = zarrfs_command("mount", "x.zarr", str(mnt), "--log-file", str(log), *options)
        result = subprocess.run(
            command, cwd=tmp_path / "stores", capture_output=True, text=True, check=False
        )
        with daemon_of(mnt):
            assert result.returncode == 0, result.stderr
            assert [e.source for e in entries(mnt)] == [source]
            assert findmnt_source(mnt) == source
            done = run(zarrfs_command("umount", str(mnt)), dict(os.environ))
            assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("foreground", [False, True], ids=["detached", "foreground"])
@pytest.mark.parametrize("how", ["profile", "environment"])
def test_an_unreachable_endpoint_is_one_line_naming_its_host(
    setup: Setup, mnt: Path, how: str, foreground: bool
) -> None:
    env, args = dict(setup.env), ["-f"] if foreground else []
    if how == "profile":
        args += ["-o", "profile=dead"]
    else:
        env["AWS_ENDPOINT_URL"] = f"http://{setup.dead}"
    with daemon_of(mnt):
        result = run(zarrfs_command("mount", setup.url, str(mnt), *args), env)
        line = assert_one_error_line(result, f"cannot connect to {setup.dead}", setup.url)
        assert not entries(mnt)
        for word in setup.secrets():
            assert word.decode() not in line


def test_a_credential_option_is_refused_saying_where_credentials_go(
    setup: Setup, mnt: Path
) -> None:
    result = run(
        zarrfs_command("mount", setup.url, str(mnt), "-o", "aws_secret_access_key=topsecret"),
        setup.env,
    )
    assert result.returncode == 2
    line = assert_one_error_line(result, "'aws_secret_access_key'", "~/.aws/credentials")
    assert "topsecret" not in line
    assert not entries(mnt)


# -- mount(8): fstab and mount -t ----------------------------------------------------------


def mount_env(setup: Setup, *, config: bool) -> dict[str, str]:
    """mount(8)'s environment: no AWS variable but the files' places (mount(8) sets
    HOME to root's, as at boot); PATH as minimal as a unit's."""
    env = {k: v for k, v in setup.env.items() if k != "HOME"}
    env["PATH"] = MINIMAL_PATH
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(setup.aws / "credentials")
    env["AWS_CONFIG_FILE"] = str(setup.aws / "config" if config else setup.aws / "none")
    return env


def test_an_fstab_line_configured_by_a_profile(setup: Setup, mnt: Path, tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    daemon_logs.watch(log)
    fstab = tmp_path / "fstab"
    line = f"{setup.url} {mnt} fuse.zarrfs ro,_netdev,profile=lab,log_file={log} 0 0"
    fstab.write_text(f"# zarrfs test: never /etc/fstab\n{line}\n")
    env = {**mount_env(setup, config=True), "HOME": str(tmp_path)}
    result = run(["mount", "-a", "-T", str(fstab)], env)
    with daemon_of(mnt) as pid:
        assert result.returncode == 0, result.stdout + result.stderr
        assert pid is not None
        assert_mounted_store(setup, mnt)
        # mount(8) gave the helper HOME as root's, whatever its caller had
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"HOME={pwd.getpwuid(os.getuid()).pw_dir}".encode() in environ
        again = run(["mount", "-a", "-T", str(fstab)], env)  # seen mounted: left alone
        assert again.returncode == 0, again.stderr
        assert len(entries(mnt)) == 1 and alive(pid)
        assert run(["umount", str(mnt)], env).returncode == 0


def test_mount_t_configured_by_options(setup: Setup, mnt: Path, tmp_path: Path) -> None:
    """No config file at all: the endpoint and region are -o options, the keys those of
    the default profile of the credentials file."""
    log = tmp_path / "daemon.log"
    daemon_logs.watch(log)
    options = f"ro,endpoint_url={setup.server.endpoint},region={REGION},log_file={log}"
    env = mount_env(setup, config=False)
    result = run(["mount", "-t", "fuse.zarrfs", setup.url, str(mnt), "-o", options], env)
    with daemon_of(mnt) as pid:
        assert result.returncode == 0, result.stdout + result.stderr
        assert pid is not None
        assert_mounted_store(setup, mnt)
        assert run(["umount", str(mnt)], env).returncode == 0
