"""The benchmark of zarrfs (not a test): ``.venv/bin/python -m bench`` from the
repository root. Method, results and analysis: docs/benchmarks.md.

It creates its own stores with zarr-python under ``--tmp-dir``, mounts them, and
measures each figure side by side with its reference in the same run, on the same
store: zarr-python 3, tensorstore, or a memory-serving pyfuse3 filesystem as the
ceiling of what FUSE allows. Reads see the store's compressed files warm in the OS
page cache (each store is read once beforehand: dropping the page cache is not
portable), and every zarrfs read starts on a fresh mount (its chunk cache cold).

The parts, lowest first (each imports only those above it):

- ``results``: a figure, its reference, ratio and target; the table; ``BenchError``;
- ``data``: the arrays' values, the stores zarr-python makes, the checks of what
  was read or written;
- ``cpumeter``: where the CPU went while one side ran (/proc);
- ``memfs``: the memory-serving filesystems (run as ``python -m bench.memfs``);
- ``mounting``: mounts in subprocesses of ours (zarrfs, memfs), always unmounted;
  dd through them;
- ``reads``: the reference readers (zarr-python, tensorstore) and numpy's mapped sum;
- ``context``: ``Bench``, what every section is given;
- ``proxy``, ``s3servers``: the delay proxy and the S3 servers of the s3 section;
  ``shaping``: the proxy of the network section (latency and a rate per connection),
  run as ``python -m bench.shaping``;
- the sections: ``sequential`` (read-seq, read-npy, readers, memory),
  ``random_access`` (read-random, write-random), ``writes`` (write-seq),
  ``listings`` (metadata), ``sharded``, ``layouts``, ``remote`` (s3), ``network``;
- ``sections``: the registry, in run order; ``__main__``: the command line.

This package imports nothing on its own: ``python -m bench.memfs`` must start fast.
"""
