"""The ``zarrfs`` command: the click group of its subcommands, and ``main``.

Bad input ends with one line on stderr and a non-zero exit, never a traceback; a bad
option value or an unknown ``-o`` entry is a usage error (exit 2) naming the option.
mount(8) runs ``zarrfs STORE MNT -o OPTIONS``: commands/mountopts.py makes that the
command line of ``zarrfs mount``.
"""

from __future__ import annotations

import sys

import click

from zarrfs.commands.check import check_command
from zarrfs.commands.mount import mount_command
from zarrfs.commands.mountopts import command_line
from zarrfs.commands.output import fail
from zarrfs.commands.tree import tree_command
from zarrfs.commands.umount import umount_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="zarrfs")
def cli() -> None:
    """Mount Zarr stores as directories of flat array.raw / array.npy files."""


cli.add_command(check_command)  # zarrfs check STORE: commands/check.py
cli.add_command(mount_command)  # zarrfs mount STORE MOUNTPOINT: commands/mount.py
cli.add_command(tree_command)  # zarrfs tree STORE: commands/tree.py
cli.add_command(umount_command)  # zarrfs umount MOUNTPOINT: commands/umount.py


def main() -> None:
    """Entry point: click's usage errors become one line too (exit 2, as click's)."""
    try:
        # mount(8)'s form (zarrfs STORE MNT -o OPTS) and -o lists: zarrfs/commands/mountopts.py
        code = cli.main(args=command_line(sys.argv[1:], cli), standalone_mode=False)
    except click.UsageError as e:
        hint = f" (see 'zarrfs {e.ctx.info_name} --help')" if e.ctx else ""
        fail(f"{e.format_message()}{hint}", 2)
    except click.Abort:
        fail("aborted")
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
