"""The ``zarrfs`` command line: what a user runs, and nothing a mount needs to run.

* ``cli``: the click group and ``main``, the console entry point (and ``python -m
  zarrfs``); ``mountopts`` turns mount(8)'s ``zarrfs STORE MNT -o OPTIONS`` into
  ``zarrfs mount`` and checks option values.
* ``mount`` and ``umount``: check the command line, then hand over to zarrfs.daemon
  (building, serving and detaching the mount; the daemon's run state).
* ``check`` and ``tree``: read a store without mounting it. They stand on ``walk``
  (the whole hierarchy at once, as the mount lists it) and on stores, formats and
  core alone (tests/test_layers.py); ``output`` prints what they find, made
  printable, and the one error line of every command.

Commands import the daemon, never the reverse.
"""
