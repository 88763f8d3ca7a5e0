"""The mount helper's command line: ``zarrfs STORE MNT -o OPTIONS``, as mount(8) runs it.

An /etc/fstab line (``STORE MNT fuse.zarrfs ro,cache_size=1G 0 0``) or ``mount -t
fuse.zarrfs STORE MNT -o ...`` runs mount.fuse3, which runs ``zarrfs STORE MNT -o
OPTIONS`` through /bin/sh. This module turns such a command line into the one of
``zarrfs mount`` (pure: no I/O), and checks the values of that command's options:

* a first argument that is no subcommand means ``mount``;
* each ``-o`` list is split into zarrfs's own options (``ro``/``rw``, and every
  option of ``zarrfs mount`` by its name with ``-`` written ``_``: ``cache_size=1G``
  is ``--cache-size 1G``), mount(8)'s generic options, which mean nothing to a FUSE
  daemon and are dropped, and FUSE's (``allow_other``, ``default_permissions``, and
  the kernel flags libfuse applies itself: ``nosuid``, ``nodev``, ``noexec``,
  ``noatime``, ...), which go on to FUSE;
* anything else is refused here, in one usage line naming it: libfuse would refuse
  it too, but only inside the daemon and without saying which;
* a store URL's secrets (user info, query string) are kept out of the mount's
  source: ``/proc/mounts`` is readable by every user.

The same split applies to ``zarrfs mount -o ...``, so a command line and an fstab
line mean the same. Options stay where they were given, so of an option given twice
the later wins, as for any repeated option of ``zarrfs mount``.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import click

from zarrfs.core.sizes import format_size, parse_size
from zarrfs.namespace.freshness import MAX_TTL

# mount(8)'s own options and the fstab bookkeeping of other programs (systemd, udisks,
# mount.fuse3): a FUSE daemon has nothing to do with them, and libfuse refuses the ones
# it does not know, so they are dropped. The kernel flags libfuse understands (suid,
# nosuid, dev, nodev, exec, noexec, sync, async, dirsync, noatime, nodiratime,
# nostrictatime) are not here: they go to FUSE, which applies them to the mount.
GENERIC = frozenset(
    {
        "defaults",
        "auto",
        "noauto",
        "user",
        "nouser",
        "users",
        "owner",
        "noowner",
        "group",
        "nogroup",
        "nofail",
        "_netdev",
        "atime",
        "diratime",
        "relatime",
        "norelatime",
        "strictatime",
        "lazytime",
        "nolazytime",
        "iversion",
        "noiversion",
        "mand",
        "nomand",
        "silent",
        "loud",
        # Kernel flags libfuse 3.14 does not know (it would refuse the mount): a FUSE
        # mount keeps no directory access times worth sparing.
        "nodiratime",
        "nostrictatime",
    }
)
GENERIC_PREFIXES = ("x-", "X-", "comment=", "user=", "helper=", "uhelper=")

# Options of ``zarrfs mount`` that make no sense in -o: mount(8) waits for its helper,
# so a foreground daemon would hang it. ``subtype`` is FUSE's, but zarrfs sets it:
# ``fuse.zarrfs`` is how ``zarrfs umount`` knows its mounts.
REFUSED = {
    "foreground": "mount(8) waits for its helper to return; run 'zarrfs mount -f'",
    "subtype": "zarrfs sets it (fuse.zarrfs is how zarrfs umount knows its mounts)",
}

# Names of credentials (aws_secret_access_key, secret_key, session_token, passwd_file,
# ...): no option carries one, since every user can read /proc/mounts and command
# lines. Refused by name, whatever the value, saying where credentials go.
CREDENTIAL = re.compile(r"secret|token|passw|credential|access_key|(^|_)key(_|$)", re.IGNORECASE)
WHERE_CREDENTIALS_GO = (
    "credentials never go in mount options (every user can read /proc/mounts): put "
    "them in the profile's ~/.aws/credentials (profile=NAME) or in the daemon's "
    "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
)

# The options libfuse 3.14 accepts (lib/mount.c, lib/fuse_lowlevel.c), but ``ro`` and
# ``rw``, which are zarrfs's own, and ``subtype``: flags, and options taking a value,
# with whether the value must be a number. libfuse refuses anything else, and only
# inside the daemon, as "fuse_session_new() failed".
FUSE_FLAGS = frozenset(
    {
        "allow_other",
        "allow_root",
        "auto_unmount",
        "blkdev",
        "debug",
        "default_permissions",
        "suid",
        "nosuid",
        "dev",
        "nodev",
        "exec",
        "noexec",
        "async",
        "sync",
        "dirsync",
        "noatime",
    }
)
FUSE_VALUES = {
    "fsname": False,
    "max_read": True,
    "blksize": True,
    "context": False,
    "fscontext": False,
    "defcontext": False,
    "rootcontext": False,
}
MAX_FUSE_NUMBER = 2**32 - 1  # libfuse reads them as unsigned int
_OPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class MountOptionError(click.UsageError):
    """An option in ``-o`` that is zarrfs's own but used wrongly (``cache_size`` with
    no value, ``anonymous=yes``): one usage line, exit 2."""


@dataclass(frozen=True)
class OwnOption:
    """An option of ``zarrfs mount`` as ``-o`` names it."""

    flag: str  # the command-line option: "--cache-size"
    takes_value: bool


@dataclass
class Translated:
    """What one ``-o`` list means: command-line arguments, FUSE options, dropped ones."""

    args: list[str] = field(default_factory=list)
    fuse: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        return [*self.args, *(["-o", ",".join(self.fuse)] if self.fuse else [])]


def own_options(command: click.Command) -> dict[str, OwnOption]:
    """``-o`` name → option, for every long option of ``command`` (``--no-consolidated``
    is ``no_consolidated``, ``rw`` is ``--rw``), plus ``ro`` for ``--read-only``."""
    table: dict[str, OwnOption] = {}
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        for opt in param.opts:
            name = opt[2:].replace("-", "_")
            if opt.startswith("--") and name not in ("help", "version"):
                table[name] = OwnOption(opt, not param.is_flag)
    if "read_only" in table:
        table["ro"] = table["read_only"]
    return table


def is_generic(option: str) -> bool:
    return option in GENERIC or option.startswith(GENERIC_PREFIXES)


def _fuse_option(option: str, name: str, has_value: bool, value: str) -> None:
    """Raise MountOptionError unless libfuse takes ``option`` as it is written."""
    if name in FUSE_FLAGS:
        if has_value:
            raise MountOptionError(f"mount option {name!r} takes no value")
    elif name in FUSE_VALUES:
        if not value:
            raise MountOptionError(f"mount option {name!r} needs a value: {name}=...")
        if FUSE_VALUES[name] and not (value.isascii() and value.isdigit()):
            raise MountOptionError(f"mount option {name!r} needs a number, not {value!r}")
        if FUSE_VALUES[name] and int(value) > MAX_FUSE_NUMBER:
            raise MountOptionError(f"mount option {name!r}: {value} is over {MAX_FUSE_NUMBER}")
    else:
        raise MountOptionError(f"unknown mount option {option!r}")


def translate(options: Iterable[str], own: Mapping[str, OwnOption]) -> Translated:
    """Split one ``-o`` list (already cut at commas) into its three kinds; anything
    that is none of them is a MountOptionError naming it."""
    out = Translated()
    access: str | None = None  # "--read-only" or "--rw": of ro and rw the later wins
    previous: str | None = None  # the option before, if it was one of ours with a value
    for option in options:
        if not option:
            continue
        name, has_value, value = option.partition("=")
        if option.startswith("-"):
            raise MountOptionError(
                f"mount option {option!r} starts with '-': -o takes option names "
                f"(cache_size=1G); give {option!r} as an argument of zarrfs mount"
            )
        if option in ("ro", "rw") or (name in own and own[name].flag == "--read-only"):
            if has_value:
                raise MountOptionError(f"mount option {name!r} takes no value")
            access = "--rw" if option == "rw" else "--read-only"
        elif name in REFUSED:
            raise MountOptionError(f"mount option {name!r} is not accepted: {REFUSED[name]}")
        elif CREDENTIAL.search(name) and name not in own and not is_generic(option):
            raise MountOptionError(f"mount option {name!r} is not accepted: {WHERE_CREDENTIALS_GO}")
        elif name in own:
            wanted = own[name]
            if wanted.takes_value and not (has_value and value):
                raise MountOptionError(f"mount option {name!r} needs a value: {name}=...")
            if not wanted.takes_value and has_value:
                raise MountOptionError(f"mount option {name!r} takes no value")
            out.args += [wanted.flag, value] if wanted.takes_value else [wanted.flag]
        elif is_generic(option):
            out.ignored.append(option)
        else:
            try:
                _fuse_option(option, name, has_value, value)
            except MountOptionError as e:
                if previous is None or _OPTION_NAME.fullmatch(name):
                    raise
                # A comma inside a value (a path) cut it in two, and the rest is no option.
                flag = own[previous].flag
                raise MountOptionError(
                    f"mount option {previous!r}: its value cannot contain a comma in -o "
                    f"({option!r} after the comma is no option); give {flag} instead"
                ) from e
            out.fuse.append(option)
        previous = name if name in own and own[name].takes_value else None
    if access is not None:
        out.args.insert(0, access)
    return out


def _value_options(command: click.Command) -> tuple[set[str], set[str]]:
    """(long, short) option strings of ``command`` that take a value."""
    long_opts: set[str] = set()
    short_opts: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag:
            for opt in param.opts:
                (long_opts if opt.startswith("--") else short_opts).add(opt)
    return long_opts, short_opts


def mount_args(
    args: list[str], command: click.Command, fuse_seen: list[str] | None = None
) -> list[str]:
    """The arguments of ``zarrfs mount`` with every ``-o`` list translated in place
    (the FUSE options found are added to ``fuse_seen``).

    Tokens are read as click reads them: ``-o VALUE``, ``-oVALUE``, grouped short
    flags ending in ``o`` (``-fo VALUE``), ``--opt VALUE`` and ``--opt=VALUE``, and
    nothing after ``--``."""
    own = own_options(command)
    seen = fuse_seen if fuse_seen is not None else []
    long_opts, short_opts = _value_options(command)
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            out += args[i - 1 :]
            break
        if token.startswith("--") or not token.startswith("-") or token == "-":
            out.append(token)
            if token in long_opts and i < len(args):  # its value, whatever it looks like
                out.append(args[i])
                i += 1
            continue
        for position in range(1, len(token)):
            short = "-" + token[position]
            if short not in short_opts:
                out.append(short)  # a flag (or an unknown option click will name)
                continue
            value = token[position + 1 :]
            if not value and i < len(args):
                value = args[i]
                i += 1
            if short == "-o":
                translated = translate(value.split(","), own)
                seen += translated.fuse
                out += translated.argv()
            else:
                out += [short, value]
            break
    return out


def command_line(args: list[str], group: click.Group) -> list[str]:
    """``zarrfs``'s arguments as its commands take them: ``zarrfs STORE MNT -o OPTS``
    (mount.fuse3's form) is ``zarrfs mount STORE MNT ...``, and the ``-o`` lists of
    a mount are translated. A store named like a subcommand is given as ``./check``."""
    if not args or args[0].startswith("-"):
        return args  # --help, --version, or an option click will complain about
    if args[0] == "mount":
        return ["mount", *mount_args(args[1:], group.commands["mount"])]
    if args[0] in group.commands:
        return args
    fuse: list[str] = []
    translated = mount_args(args, group.commands["mount"], fuse)
    if not any(option.startswith("fsname=") for option in fuse):
        # The store as the fstab line names it is the mount's source, or mount(8)
        # would not see that the line is mounted (and mount -a would mount it again);
        # a URL's secrets are left out, as every user can read /proc/mounts.
        translated += ["-o", f"fsname={fuse_escape(public_location(args[0]))}"]
    return ["mount", *translated]


def public_location(location: str) -> str:
    """``location`` as every user may see it: an ``http(s)://`` or ``s3://`` URL
    without its user info, query string and fragment (passwords, signatures,
    tokens); anything else as it is."""
    scheme, sep, _ = location.partition("://")
    if not sep or scheme.lower() not in ("http", "https", "s3"):
        return location
    parts = urllib.parse.urlsplit(location)
    host = parts.netloc.rpartition("@")[2]
    return f"{scheme}://{host}{parts.path}"


def fuse_escape(value: str) -> str:
    """``value`` as one libfuse option value: a comma, a backslash and anything outside
    printable ASCII as libfuse's octal escape of each UTF-8 byte (pyfuse3 passes
    options as ASCII, and ``zarrfs mount`` splits -o lists at every comma)."""
    out = []
    for byte in value.encode("utf-8", "surrogateescape"):
        char = chr(byte)
        out.append(char if 0x20 < byte < 0x7F and char not in ",\\" else f"\\{byte:03o}")
    return "".join(out)


# -- the values of zarrfs mount's options ------------------------------------------------

# Ranges of the option values (bytes, seconds); the sizes' upper bound is the machine's
# memory. Read-ahead: 0 keeps the kernel's, else one page up to a documented cap.
MIN_CACHE_SIZE = 4 << 10
MIN_READAHEAD = 4 << 10
MAX_READAHEAD = 1 << 30
FLUSH_INTERVAL_RANGE = (0.01, 86400.0)
METADATA_TTL_RANGE = (0.0, MAX_TTL)


def memory_size() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _bytes(value: str) -> int:
    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def check_cache_size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """A cache of at least one page and at most the machine's memory."""
    nbytes = _bytes(value)
    if nbytes < MIN_CACHE_SIZE:
        raise click.BadParameter(f"{value!r} is less than {format_size(MIN_CACHE_SIZE)}")
    if nbytes > memory_size():
        memory = format_size(memory_size())
        raise click.BadParameter(f"{value!r} is more than this machine's memory ({memory})")
    return nbytes


def check_readahead(ctx: click.Context, param: click.Parameter, value: str) -> int:
    nbytes = _bytes(value)
    if nbytes and not MIN_READAHEAD <= nbytes <= MAX_READAHEAD:
        low, high = (format_size(n) for n in (MIN_READAHEAD, MAX_READAHEAD))
        raise click.BadParameter(f"{value!r} is not 0 nor between {low} and {high}")
    return nbytes


def check_endpoint_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """An ``http(s)://host[:port][/path]`` URL, without user info or a query string:
    an option is seen by every user (``ps``, /proc/mounts), a credential never is."""
    if not value:
        return ""
    parts = urllib.parse.urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        raise click.BadParameter(f"{value!r} has no valid port") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{public_location(value)!r} is no http:// or https:// URL")
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise click.BadParameter(
            f"{public_location(value)!r}: an endpoint URL carries no user info nor query "
            f"string: {WHERE_CREDENTIALS_GO}"
        )
    return value


_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PROFILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+:/-]{0,127}")


def check_region(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """A region name (``us-east-1``; S3-compatible servers name theirs freely)."""
    if value and not _REGION.fullmatch(value):
        raise click.BadParameter(f"{value!r} is no region name (letters, digits, '-', '.', '_')")
    return value or ""


def check_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if value and not _PROFILE.fullmatch(value):
        raise click.BadParameter(f"{value!r} is no AWS profile name")
    return value or ""


def check_flush_interval(ctx: click.Context, param: click.Parameter, value: float) -> float:
    low, high = FLUSH_INTERVAL_RANGE
    if not (math.isfinite(value) and low <= value <= high):
        raise click.BadParameter(f"{value:g} is not between {low:g} and {high:g} seconds")
    return value


def check_metadata_ttl(ctx: click.Context, param: click.Parameter, value: float) -> float:
    low, high = METADATA_TTL_RANGE
    if not (math.isfinite(value) and low <= value <= high):
        raise click.BadParameter(f"{value:g} is not between {low:g} and {high:g} seconds")
    return value
