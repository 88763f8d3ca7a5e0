"""The mount daemon: everything between a checked command line and a served mount.

* ``build``: the one place that builds a mount. ``prepare_mount`` opens the store,
  takes its lock (read-write mounts) and makes the chunk cache, the write-back, the
  tree and the FUSE operations, each handed its parts; ``build_operations`` does the
  same without the lock, for in-process use.
* ``serve``: mounts the operations with pyfuse3, runs them under trio until unmounted
  or signalled, stores what is still dirty, unmounts.
* ``detach``: serves in the foreground, or forks a daemon that reports to its parent
  over a pipe until the mount is ready.
* ``logs``: where a daemon logs (a file, stderr, syslog, or the run directory).
* ``runstate``: the run directory and each daemon's run-state file, which tells
  ``zarrfs umount`` how the daemon ended.
* ``storelock``: the flock a read-write mount holds on a local store.
* ``mountinfo``: /proc/self/mountinfo parsed; ``systemd``: sd_notify; ``tuning``: the
  mount's read-ahead, malloc and the garbage collector.

Who calls whom: ``zarrfs mount`` (commands/mount.py) calls ``build.prepare_mount``,
then ``detach.serve_foreground`` or ``detach.serve_detached``, which call
``serve.serve``; ``zarrfs umount`` (commands/umount.py) reads ``mountinfo`` and
``runstate``. Nothing here imports ``zarrfs.commands`` (tests/test_layers.py).
"""
