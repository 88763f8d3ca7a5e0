"""zarrfs's own work in the ``metadata`` section, without a kernel: CPU seconds.

The FUSE handlers (zarrfs.fuse.operations.Operations) over the same group of
10 000 arrays, asked what ``ls -R`` asks (per directory: opendir, readdir,
releasedir), with readdir's replies going nowhere; the collector tuned as the daemon
tunes it. Printed: building the mount, listing the root alone on a fresh mount, a
first and a second ``ls -R``, and a first ``ls -R`` after every array was listed
ahead (fuse/ahead.py, which a mounted walk does in its idle moments): what its
requests still cost. What pyfuse3, trio and the kernel add is not in these
figures: bench/memfs.py's tree pays it alike.

    .venv/bin/python -m bench.listing_handlers [STORE]

STORE (default /var/tmp/zarrfs-listing.zarr) is made on first use.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyfuse3
import trio

from bench.listings import ARRAYS, write_metadata_group
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.daemon.tuning import tune_gc
from zarrfs.fuse import operations as operations_module
from zarrfs.fuse.operations import Operations
from zarrfs.namespace.nodes import DirNode

DEFAULT_STORE = Path("/var/tmp/zarrfs-listing.zarr")


async def list_directory(ops: Operations, inode: int, recursive: bool) -> None:
    opened = await ops.opendir(inode, None)  # type: ignore[arg-type]
    fh = opened.fh if isinstance(opened, pyfuse3.FileInfo) else opened
    await ops.readdir(fh, 0, None)  # type: ignore[arg-type]
    nodes = ops.dirs.get(fh).nodes
    await ops.releasedir(fh)
    if recursive:
        for node in nodes:
            if isinstance(node, DirNode):
                await list_directory(ops, ops.inodes.inode_of(node), recursive)


def timed(ops: Operations, recursive: bool) -> float:
    start = time.process_time()
    trio.run(list_directory, ops, pyfuse3.ROOT_INODE, recursive)
    return time.process_time() - start


def main() -> None:
    store = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_STORE
    if not store.exists():
        write_metadata_group(store, ARRAYS)
    operations_module.pyfuse3.readdir_reply = lambda *_: True  # no kernel to reply to
    options = MountOptions(read_only=True)

    start = time.process_time()
    ops = build_operations(str(store), options)
    built = time.process_time() - start
    tune_gc()
    root = timed(ops, recursive=False)

    ops = build_operations(str(store), options)
    first = timed(ops, recursive=True)
    second = timed(ops, recursive=True)

    ops = build_operations(str(store), options)
    timed(ops, recursive=False)
    children = [n for n in ops.tree.listing(ops.tree.root).nodes if type(n) is DirNode]
    start = time.process_time()
    for child in children:
        ops.ahead.make(child)
    ahead = time.process_time() - start
    requests = timed(ops, recursive=True)
    print(
        f"CPU seconds: mount built {built:.3f}; on a fresh mount, the root listed "
        f"{root:.3f}; ls -R {first:.3f}, again {second:.3f}; listed ahead "
        f"{ahead:.3f}, then ls -R {requests:.3f}"
    )


if __name__ == "__main__":
    main()
