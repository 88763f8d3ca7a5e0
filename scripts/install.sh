#!/usr/bin/env bash
# Install everything zarrfs needs on Debian (12 "bookworm" and later), idempotently:
#   - system packages: fuse3 (fusermount3, mount.fuse3), and what building libfuse and
#     pyfuse3 takes: gcc + libc6-dev, meson, ninja-build, pkg-config, patch, xz-utils,
#     and python3 / python3-dev / python3-venv when the current python3 lacks them;
#   - every program the tests and scripts run (see PROGRAMS below): fio, getfattr
#     (attr), mount/umount/findmnt (util-linux, mount), dd/cat/ls/truncate/mkfifo
#     (coreutils), od (coreutils), node (nodejs), and npm where nodejs lacks it
#     (Debian's nodejs does; NodeSource's brings its own, and conflicts with it);
#   - Azurite, Microsoft's Azure Storage emulator, from npm into <repo>/.node (the
#     Azure store's tests run it: tests/support/clouds.py);
#   - a virtualenv in <repo>/.venv with a private libfuse 3.17.2 in .venv/libfuse and
#     pyfuse3 compiled against it (scripts/build_libfuse.sh: one patch makes libfuse ask
#     the kernel for FUSE_DIRECT_IO_ALLOW_MMAP, so programs can mmap zarrfs's direct_io
#     files MAP_SHARED), and zarrfs installed editable plus the test extra (pytest,
#     hypothesis, zarr, tensorstore, xarray, ruff);
#   - a virtualenv in <repo>/.venv-zarr2 holding zarr-python 2.18, which cannot
#     share one with zarr-python 3 (tests/mount/reads/test_zarr_readers.py runs it);
#   - /usr/local/bin/zarrfs, a link to the venv's zarrfs (mount(8) runs it for fstab).
# Safe to run again: apt is skipped when nothing is missing, the venv is reused, and
# libfuse and pyfuse3 are built once.
# Run as root (or as a user with sudo) from any directory.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$(pwd)"
VENV="$REPO_ROOT/.venv"

say() { printf 'install: %s\n' "$*"; }
die() { printf 'install: ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- apt packages
pkg_installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

# The build of libfuse and pyfuse3 (scripts/build_libfuse.sh), fuse3 for fusermount3
# (libfuse runs it to mount without root), and the programs the tests and scripts run
# (each test that runs one fails loudly without it: never a skip). Keep this list in
# step with tests/process/test_install.py, which checks every program named there is
# on PATH.
PACKAGES=(fuse3 pkg-config gcc libc6-dev meson ninja-build patch xz-utils fio attr util-linux mount coreutils findutils gdal-bin netcdf-bin cdo nco libtiff-tools imagej nodejs linux-perf)
need=()
for pkg in "${PACKAGES[@]}"; do
    pkg_installed "$pkg" || need+=("$pkg")
done
command -v npm >/dev/null 2>&1 || need+=(npm)

if ! command -v python3 >/dev/null 2>&1; then
    need+=(python3 python3-dev python3-venv)
else
    if ! python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' 2>/dev/null; then
        need+=(python3-dev)
    fi
    # Debian ships the venv module without ensurepip unless python3-venv is installed.
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
        need+=(python3-venv)
    fi
fi

if [ "${#need[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 \
        || die "missing packages (${need[*]}) and no apt-get: this script supports Debian only"
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "missing packages (${need[*]}); run as root to install them"
        SUDO=(sudo)
    fi
    say "installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -q
    "${SUDO[@]}" apt-get install -y -q "${need[@]}"
else
    say "Debian packages already installed (${PACKAGES[*]}; python3 headers + venv)"
fi

# ------------------------------------------------------------------ /dev/fuse
if [ ! -e /dev/fuse ]; then
    say "/dev/fuse is missing; trying 'modprobe fuse'"
    if command -v modprobe >/dev/null 2>&1; then
        modprobe fuse 2>/dev/null || true
    fi
    [ -e /dev/fuse ] || die "/dev/fuse does not exist and 'modprobe fuse' did not create it.
  zarrfs needs the FUSE kernel module. On a normal machine: 'modprobe fuse' as root.
  In a container: start it with '--device /dev/fuse --cap-add SYS_ADMIN'."
fi

# ---------------------------------------------------------------- virtualenv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    say "reusing virtualenv $VENV"
else
    say "creating virtualenv $VENV with $(command -v python3) ($(python3 --version 2>&1))"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1
say "upgrading pip"
"$VENV/bin/python" -m pip install -q --upgrade pip
# pyfuse3 is built first, against the private libfuse: PyPI has only its sdist, which
# pip would otherwise compile against the system's libfuse 3.14. pip then keeps it
# (it satisfies pyfuse3>=3.3); --check makes sure it did.
bash scripts/build_libfuse.sh "$VENV"
say "installing zarrfs (editable) with the test extra"
"$VENV/bin/python" -m pip install -q -e ".[test]"
bash scripts/build_libfuse.sh --check "$VENV"
# pip compiles a package's bytecode at a regular install, not at an editable one: a
# daemon would otherwise compile zarrfs at every start wherever writing bytecode is
# off (PYTHONDONTWRITEBYTECODE), a tenth of a second of each mount.
say "compiling zarrfs's bytecode"
"$VENV/bin/python" -m compileall -q -j 0 zarrfs bench

"$VENV/bin/python" -c 'import pyfuse3, numpy, numcodecs, trio, click' \
    || die "the virtualenv is missing a runtime dependency (see the pip output above)"

ZARR2_VENV="$REPO_ROOT/.venv-zarr2"
if ! "$ZARR2_VENV/bin/python" -c 'import zarr, sys; sys.exit(not zarr.__version__.startswith("2.18"))' \
        >/dev/null 2>&1; then
    say "creating $ZARR2_VENV with zarr-python 2.18 (a second Zarr reader for the tests)"
    rm -rf "$ZARR2_VENV"
    python3 -m venv "$ZARR2_VENV"
    "$ZARR2_VENV/bin/python" -m pip install -q 'zarr>=2.18,<2.19'
fi

# ------------------------------------------------------------------ Azurite
AZURITE_VERSION=3.35.0
NODE_DIR="$REPO_ROOT/.node"
AZURITE_PACKAGE="$NODE_DIR/node_modules/azurite/package.json"
if [ -f "$AZURITE_PACKAGE" ] && grep -q "\"version\": \"$AZURITE_VERSION\"" "$AZURITE_PACKAGE"; then
    say "Azurite $AZURITE_VERSION already in $NODE_DIR"
else
    say "installing Azurite $AZURITE_VERSION into $NODE_DIR (the Azure store's tests)"
    npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION"
fi

# ------------------------------------------------------------- the zarrfs command
# /usr/local/bin/zarrfs -> the venv's script: for users, and for fstab lines of type
# fuse.zarrfs. mount(8) runs mount.fuse3, which runs "zarrfs STORE MNT -o OPTIONS"
# through /bin/sh; mount(8) removes PATH from its helpers' environment, so the shell's
# own default PATH is searched (dash: /usr/local/sbin:/usr/local/bin:/usr/sbin:
# /usr/bin:/sbin:/bin), whatever the caller's PATH: this one link is enough.
# tests/process/test_install.py and tests/process/test_fstab.py check it.
LINK=/usr/local/bin/zarrfs
if [ "$(readlink "$LINK" 2>/dev/null || true)" = "$VENV/bin/zarrfs" ]; then
    say "$LINK already links to $VENV/bin/zarrfs"
elif [ -e "$LINK" ] && [ ! -L "$LINK" ]; then
    say "WARNING: $LINK exists and is not a link: left alone (fstab mounts run that one)"
elif [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$LINK")" ] && ! command -v sudo >/dev/null 2>&1; then
    say "WARNING: cannot write $LINK without root: fstab mounts of type fuse.zarrfs need it"
else
    LINK_SUDO=()
    if [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$LINK")" ]; then
        LINK_SUDO=(sudo)
    fi
    "${LINK_SUDO[@]}" ln -sfn "$VENV/bin/zarrfs" "$LINK"
    say "linked $LINK -> $VENV/bin/zarrfs"
fi
say "done: $VENV (activate with: source .venv/bin/activate)"
