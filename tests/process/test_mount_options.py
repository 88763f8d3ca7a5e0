"""Every option of ``zarrfs mount`` has a range, and every ``-o`` entry is one zarrfs,
mount(8) or libfuse knows: anything else is one usage line naming the option (exit 2),
before anything is mounted, never libfuse's "fuse_session_new() failed" from inside
the daemon.

Table-driven: what ``-o`` lists are refused (pure), which values each option takes
(the command's own parsing, in-process), and a few of each on the real command line.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.mounting import unmount
from zarrfs.commands import mountopts
from zarrfs.commands.cli import cli

OWN = mountopts.own_options(cli.commands["mount"])
MEMORY = mountopts.memory_size()

# -- -o entries (pure) -------------------------------------------------------------------

REFUSED_ENTRIES = [
    # (-o list, what the one line says)
    ("-f", "mount option '-f' starts with '-'"),
    ("ro,-f", "mount option '-f' starts with '-'"),
    ("--foreground", "mount option '--foreground' starts with '-'"),
    ("log_file=/x/a,b.log", "mount option 'log_file': its value cannot contain a comma"),
    ("log_file=/x/a,b.log", "give --log-file instead"),
    ("cache_size=1,5G", "mount option 'cache_size': its value cannot contain a comma"),
    ("no_such_option", "unknown mount option 'no_such_option'"),
    ("cache_size=1G,no_such_option", "unknown mount option 'no_such_option'"),
    ("user_id=0", "unknown mount option 'user_id=0'"),  # libfuse sets it itself
    ("allow_other=yes", "mount option 'allow_other' takes no value"),
    ("nosuid=1", "mount option 'nosuid' takes no value"),
    ("max_read=abc", "mount option 'max_read' needs a number, not 'abc'"),
    ("max_read=-1", "mount option 'max_read' needs a number"),
    ("max_read=99999999999", "mount option 'max_read': 99999999999 is over 4294967295"),
    ("max_read", "mount option 'max_read' needs a value"),
    ("fsname=", "mount option 'fsname' needs a value"),
    ("subtype=other", "mount option 'subtype' is not accepted"),
    ("rw=1", "mount option 'rw' takes no value"),
]


@pytest.mark.parametrize(("options", "says"), REFUSED_ENTRIES)
def test_an_entry_that_would_reach_fuse_as_garbage_is_refused(options: str, says: str) -> None:
    with pytest.raises(mountopts.MountOptionError) as refused:
        mountopts.translate(options.split(","), OWN)
    assert says in refused.value.format_message()
    assert "\n" not in refused.value.format_message()


ACCEPTED_ENTRIES = [
    # every option libfuse 3.14 takes, but ro/rw (zarrfs's) and subtype (zarrfs sets it)
    ("allow_other,allow_root,auto_unmount,blkdev,debug,default_permissions", 6),
    ("suid,nosuid,dev,nodev,exec,noexec,async,sync,dirsync,noatime", 10),
    ("fsname=a b,max_read=131072,blksize=4096,context=x,fscontext=x", 5),
    ("defcontext=x,rootcontext=x", 2),
]


@pytest.mark.parametrize(("options", "count"), ACCEPTED_ENTRIES)
def test_fuse_options_libfuse_knows_go_to_fuse(options: str, count: int) -> None:
    assert len(mountopts.translate(options.split(","), OWN).fuse) == count


def test_kernel_flags_libfuse_does_not_know_are_ignored() -> None:
    """libfuse 3.14 refuses nodiratime and nostrictatime (it applies atime, noatime)."""
    translated = mountopts.translate(["nodiratime", "nostrictatime", "noatime"], OWN)
    assert (translated.fuse, translated.ignored) == (["noatime"], ["nodiratime", "nostrictatime"])


# -- values (the command's own parsing) ---------------------------------------------------


def parsed(*args: str) -> dict[str, object]:
    """The values ``zarrfs mount ARGS store mnt`` would run with (nothing is run)."""
    line = mountopts.command_line(["mount", *args, "store", "mnt"], cli)
    with cli.commands["mount"].make_context("mount", line[1:]) as ctx:
        return dict(ctx.params)


GOOD_VALUES = [
    # (arguments, parameter, value)
    ((), "cache_size", 512 << 20),
    (("--cache-size", "4K"), "cache_size", 4096),
    (("-o", "cache_size=64M"), "cache_size", 64 << 20),
    (("--write-cache-size", "16K"), "write_cache_size", 16 << 10),
    (("--readahead", "0"), "readahead", 0),
    (("--readahead", "4K"), "readahead", 4096),
    (("--readahead", "1G"), "readahead", 1 << 30),
    (("--flush-interval", "0.01"), "flush_interval", 0.01),
    (("--flush-interval", "86400"), "flush_interval", 86400.0),
    (("-o", "flush_interval=2.5"), "flush_interval", 2.5),
    (("--metadata-ttl", "0"), "metadata_ttl", 0.0),
    (("-o", "metadata_ttl=60"), "metadata_ttl", 60.0),
    (("--metadata-ttl", "604800"), "metadata_ttl", 604800.0),
]


@pytest.mark.parametrize(("args", "name", "value"), GOOD_VALUES)
def test_values_within_range_are_taken(args: tuple[str, ...], name: str, value: object) -> None:
    assert parsed(*args)[name] == value


BAD_VALUES = [
    # (arguments, the option the line names, what it says)
    (("--cache-size", "99999999999T"), "--cache-size", "more than this machine's memory"),
    (("-o", "cache_size=99999999999T"), "--cache-size", "more than this machine's memory"),
    (("--cache-size", f"{MEMORY + 1}"), "--cache-size", "more than this machine's memory"),
    (("--cache-size", "1K"), "--cache-size", "less than 4 KiB"),
    (("--cache-size", "0"), "--cache-size", "less than 4 KiB"),
    (("--cache-size", "lots"), "--cache-size", "invalid size 'lots'"),
    (("--write-cache-size", "99999999999T"), "--write-cache-size", "machine's memory"),
    (("--write-cache-size", "100"), "--write-cache-size", "less than 4 KiB"),
    (("--flush-interval", "inf"), "--flush-interval", "inf is not between 0.01 and 86400"),
    (("--flush-interval", "nan"), "--flush-interval", "not between 0.01 and 86400"),
    (("--flush-interval", "1e30"), "--flush-interval", "not between 0.01 and 86400"),
    (("--flush-interval", "1e-9"), "--flush-interval", "not between 0.01 and 86400"),
    (("--flush-interval", "0"), "--flush-interval", "not between 0.01 and 86400"),
    (("--flush-interval", "-5"), "--flush-interval", "not between 0.01 and 86400"),
    (("-o", "flush_interval=inf"), "--flush-interval", "not between 0.01 and 86400"),
    (("--metadata-ttl", "-1"), "--metadata-ttl", "not between 0 and 604800"),
    (("--metadata-ttl", "inf"), "--metadata-ttl", "not between 0 and 604800"),
    (("-o", "metadata_ttl=nan"), "--metadata-ttl", "not between 0 and 604800"),
    (("--readahead", "2K"), "--readahead", "is not 0 nor between 4 KiB and 1 GiB"),
    (("--readahead", "2G"), "--readahead", "is not 0 nor between 4 KiB and 1 GiB"),
    (("--log-level", "loud"), "--log-level", "unknown log level 'loud'"),
    (("--disk-cache-size", "100K"), "--disk-cache-size", "less than 1 MiB"),
    (("-o", "disk_cache_size=lots"), "--disk-cache-size", "invalid size 'lots'"),
]


@pytest.mark.parametrize(("args", "option", "says"), BAD_VALUES)
def test_values_out_of_range_name_the_option(args: tuple[str, ...], option: str, says: str) -> None:
    with pytest.raises(click.BadParameter) as refused:
        parsed(*args)
    message = refused.value.format_message()
    assert option in message and says in message, message


# -- on the command line: one line, exit 2, nothing mounted ---------------------------------

COMMAND_LINES = [
    (["-o", "log_file=/x/a,b.log"], "log_file"),
    (["-o", "ro,-f"], "'-f'"),
    (["-o", "no_such_option"], "no_such_option"),
    (["-o", "cache_size=99999999999T"], "--cache-size"),
    (["--flush-interval", "inf"], "--flush-interval"),
    (["--flush-interval", "1e30"], "--flush-interval"),
    (["--flush-interval", "1e-9"], "--flush-interval"),
    (["--cache-size", "lots"], "--cache-size"),
    (["--readahead", "fast"], "--readahead"),
    (["--rw", "--read-only"], "--rw and --read-only"),
    (["--rw", "-o", "ro"], "--rw and --read-only"),
    (["-o", "rw", "--read-only"], "--rw and --read-only"),
]


@pytest.mark.parametrize(("args", "needle"), COMMAND_LINES)
def test_a_bad_option_is_one_usage_line_before_mounting(
    args: list[str], needle: str, example_store: Path, tmp_path: Path
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        result = run_cli("mount", *args, str(example_store), str(mnt))
        assert_one_error_line(result, needle)
        assert result.returncode == 2, result.stderr
        assert not os.path.ismount(mnt)
    finally:
        unmount(mnt)  # a check that let the mount through
