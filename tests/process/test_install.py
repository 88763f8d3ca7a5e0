"""scripts/install.sh installs every program the tests and scripts run.

A program installed by hand on one machine hides a missing install step until the
suite runs on a fresh one. This test reads every ``subprocess`` call with a literal
command in tests/, scripts/, zarrfs/ and bench/ (and the shell scripts' commands we know
of), and checks that each program is one install.sh provides and is on PATH; and that the
venv's pyfuse3 runs on the libfuse scripts/build_libfuse.sh builds into <repo>/.venv/libfuse.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.clouds import AZURITE
from tests.support.paths import REPO

# program → the Debian package install.sh installs it with
PROGRAMS = {
    "fusermount3": "fuse3",
    "fio": "fio",
    "getfattr": "attr",
    "setfattr": "attr",
    "mount": "mount",
    "umount": "mount",
    "findmnt": "util-linux",
    "dd": "coreutils",
    "cat": "coreutils",
    "ls": "coreutils",
    "od": "coreutils",
    "truncate": "coreutils",
    "mkfifo": "coreutils",
    "find": "findutils",  # the listing-memory test stats every entry with find
    "bash": "bash",
    "gdalinfo": "gdal-bin",  # the sidecar headers' tests read array.raw through GDAL
    "gdal_translate": "gdal-bin",
    "gdalsrsinfo": "gdal-bin",  # the WKT of an EPSG code, as GDAL gives it: test_geo_headers.py
    "ncdump": "netcdf-bin",  # netCDF-C reads the mount as a Zarr store: test_zarr_readers.py
    "cdo": "cdo",  # reads group.nc: the netCDF view's tests
    "ncks": "nco",  # reads group.nc: the netCDF view's tests
    "tiffinfo": "libtiff-tools",  # reads array.tif: the TIFF view's tests
    "tiffdump": "libtiff-tools",
    "imagej": "imagej",  # opens array.tif as a stack, headless: the TIFF view's tests
    "node": "nodejs",  # runs Azurite, the Azure emulator: tests/support/clouds.py
    "perf": "linux-perf",  # python -m bench --profile: bench/profiling.py
    # scripts/build_libfuse.sh builds libfuse and pyfuse3 with them
    "gcc": "gcc",
    "meson": "meson",
    "ninja": "ninja-build",
    "pkg-config": "pkg-config",
    "patch": "patch",
    "xz": "xz-utils",
    "ldd": "libc-bin",  # which libfuse pyfuse3 loads: test_pyfuse3_links_the_libfuse_...
}
_ESSENTIAL = {"bash", "libc-bin"}  # Debian's essential set: always there
_SUBPROCESS = {"run", "Popen", "check_output", "check_call", "call"}


def _literal_programs(source: str) -> set[str]:
    """First elements of literal argument lists passed to subprocess functions."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in _SUBPROCESS):
            continue
        if not (isinstance(func.value, ast.Name) and func.value.id == "subprocess"):
            continue
        first = node.args[0]
        if isinstance(first, ast.List) and first.elts and isinstance(first.elts[0], ast.Constant):
            found.add(str(first.elts[0].value))
    return found


def test_literal_programs_are_found_in_code() -> None:
    source = 'import subprocess\nsubprocess.run(["fio", "x"])\nsubprocess.Popen(["ls"])\n'
    assert _literal_programs(source) == {"fio", "ls"}


def test_every_program_the_code_runs_is_installed_by_install_sh() -> None:
    used: set[str] = set()
    for folder in ("tests", "scripts", "zarrfs", "bench"):
        for path in (REPO / folder).rglob("*.py"):
            used |= _literal_programs(path.read_text())
    unknown = sorted(used - set(PROGRAMS))
    assert not unknown, (
        f"add these programs (and their packages) to PROGRAMS and install.sh: {unknown}"
    )
    install = (REPO / "scripts" / "install.sh").read_text()
    packages_line = next(line for line in install.splitlines() if line.startswith("PACKAGES=("))
    packages = set(packages_line.removeprefix("PACKAGES=(").rstrip(")").split())
    missing = sorted({PROGRAMS[p] for p in PROGRAMS} - packages - _ESSENTIAL)
    assert not missing, f"install.sh does not install {missing}"


def test_every_program_is_on_path() -> None:
    absent = [p for p in PROGRAMS if shutil.which(p) is None]
    assert not absent, f"not on PATH (run scripts/install.sh): {absent}"


def test_azurite_is_installed_in_the_repository() -> None:
    """The Azure store's tests run Azurite from <repo>/.node, where install.sh puts it."""
    install = (REPO / "scripts" / "install.sh").read_text()
    version = install.split("AZURITE_VERSION=", 1)[1].split()[0]
    package = REPO / ".node" / "node_modules" / "azurite" / "package.json"
    assert package.is_file(), f"{package} is missing (run scripts/install.sh)"
    assert json.loads(package.read_text())["version"] == version
    assert AZURITE.is_file() and AZURITE.is_relative_to(package.parent)


def test_zarrfs_is_linked_where_mount_finds_it() -> None:
    """fstab lines of type fuse.zarrfs: mount(8) runs mount.fuse3, which runs
    ``zarrfs STORE MNT -o ...`` through /bin/sh with no PATH in its environment (mount
    removes it), so the shell's default PATH must find zarrfs: install.sh links
    /usr/local/bin/zarrfs to the venv's (tests/test_fstab.py runs the real chain)."""
    link = Path("/usr/local/bin/zarrfs")
    script = Path(sys.prefix) / "bin" / "zarrfs"
    assert link.is_symlink(), f"{link} is not a link (run scripts/install.sh)"
    assert os.readlink(link) == str(script), f"{link} -> {os.readlink(link)}, not {script}"
    assert f"LINK={link}" in (REPO / "scripts" / "install.sh").read_text()


def test_pyfuse3_links_the_libfuse_built_in_the_venv() -> None:
    """zarrfs's direct_io files can be mmapped MAP_SHARED only with the libfuse that
    scripts/build_libfuse.sh patches to ask for FUSE_DIRECT_IO_ALLOW_MMAP: the pyfuse3
    the tests import must load it from <repo>/.venv/libfuse, not the system's 3.14."""
    library = (REPO / ".venv" / "libfuse" / "lib" / "libfuse3.so.4").resolve()
    assert library.is_file(), f"{library} is missing (run scripts/install.sh)"
    import pyfuse3  # here: without the library, the import fails on it

    ldd = subprocess.run(["ldd", pyfuse3.__file__], capture_output=True, text=True, check=True)
    loaded = {}  # libfuse's soname → the file ldd resolves it to (or "not found")
    for line in ldd.stdout.splitlines():
        name, sep, target = line.strip().partition(" => ")
        if sep and name.startswith("libfuse"):
            path = target.split(" (", 1)[0]
            loaded[name] = str(Path(path).resolve()) if path.startswith("/") else path
    assert loaded == {"libfuse3.so.4": str(library)}, (
        f"{pyfuse3.__file__} loads {loaded or 'no libfuse'}, not {library} "
        "(run scripts/build_libfuse.sh)"
    )


def test_the_venv_pyfuse3_lets_the_kernel_keep_listings() -> None:
    """scripts/pyfuse3.patch gives opendir's FileInfo cache_readdir: without it every
    listing reaches the daemon (fuse/operations.py's CACHED_LISTINGS)."""
    import pyfuse3

    from zarrfs.fuse.operations import CACHED_LISTINGS

    assert pyfuse3.FileInfo(fh=1, cache_readdir=True).cache_readdir
    assert CACHED_LISTINGS


def test_the_venv_libfuse_carries_the_patch() -> None:
    """build_libfuse.sh --check: the venv's libfuse was built from the sources and the
    patch the script names now (its stamp), and pyfuse3 links it."""
    check = subprocess.run(
        ["bash", str(REPO / "scripts" / "build_libfuse.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_zarrfs_module_has_its_bytecode_compiled() -> None:
    """A daemon imports some 140 modules of zarrfs before it mounts; where writing
    bytecode is off (PYTHONDONTWRITEBYTECODE) it would compile each at every start
    unless install.sh compiled them, as pip does at a regular install."""
    missing = [
        str(source.relative_to(REPO))
        for source in sorted((REPO / "zarrfs").rglob("*.py"))
        if not Path(importlib.util.cache_from_source(str(source))).is_file()
    ]
    assert not missing, f"no compiled bytecode for {missing[:5]} (run scripts/install.sh)"
