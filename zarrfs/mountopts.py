"""The mount helper's command line: ``zarrfs STORE MNT -o OPTIONS``, as mount(8) runs it.

An /etc/fstab line (``STORE MNT fuse.zarrfs ro,cache_size=1G 0 0``) or ``mount -t
fuse.zarrfs STORE MNT -o ...`` runs mount.fuse3, which runs ``zarrfs STORE MNT -o
OPTIONS`` through /bin/sh. This module turns such a command line into the one of
``zarrfs mount`` (pure: no I/O):

* a first argument that is no subcommand means ``mount``;
* each ``-o`` list is split into zarrfs's own options (``ro``/``rw``, and every
  option of ``zarrfs mount`` by its name with ``-`` written ``_``: ``cache_size=1G``
  is ``--cache-size 1G``), mount(8)'s generic options, which mean nothing to a FUSE
  daemon and are dropped, and the rest, which go on to FUSE (``allow_other``,
  ``default_permissions``, and the kernel flags libfuse applies itself: ``nosuid``,
  ``nodev``, ``noexec``, ``noatime``, ...).

The same split applies to ``zarrfs mount -o ...``, so a command line and an fstab
line mean the same. Options stay where they were given, so of an option given twice
the later wins, as for any repeated option of ``zarrfs mount``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import click

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
    }
)
GENERIC_PREFIXES = ("x-", "X-", "comment=", "user=", "helper=", "uhelper=")

# Options of ``zarrfs mount`` that make no sense in -o: mount(8) waits for its helper,
# so a foreground daemon would hang it.
REFUSED = {"foreground": "mount(8) waits for its helper to return; run 'zarrfs mount -f'"}


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
    is ``no_consolidated``), plus ``ro`` for ``--read-only``. ``rw`` is the default and
    maps to nothing."""
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


def translate(options: Iterable[str], own: Mapping[str, OwnOption]) -> Translated:
    """Split one ``-o`` list (already cut at commas) into its three kinds."""
    out = Translated()
    read_only = False
    for option in options:
        if not option:
            continue
        name, has_value, value = option.partition("=")
        if option == "rw":
            read_only = False  # of ro and rw, the later wins (as mount(8) reads them)
        elif name in REFUSED:
            raise MountOptionError(f"mount option {name!r} is not accepted: {REFUSED[name]}")
        elif name in own and own[name].flag == "--read-only":
            if has_value:
                raise MountOptionError(f"mount option {name!r} takes no value")
            read_only = True
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
            out.fuse.append(option)
    if read_only:
        out.args.insert(0, "--read-only")
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
        # would not see that the line is mounted (and mount -a would mount it again).
        translated += ["-o", f"fsname={fuse_escape(args[0])}"]
    return ["mount", *translated]


def fuse_escape(value: str) -> str:
    """``value`` as one libfuse option value: a comma, a backslash and anything outside
    printable ASCII as libfuse's octal escape of each UTF-8 byte (pyfuse3 passes
    options as ASCII, and ``zarrfs mount`` splits -o lists at every comma)."""
    out = []
    for byte in value.encode("utf-8", "surrogateescape"):
        char = chr(byte)
        out.append(char if 0x20 < byte < 0x7F and char not in ",\\" else f"\\{byte:03o}")
    return "".join(out)
