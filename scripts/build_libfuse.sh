#!/usr/bin/env bash
# Build a private libfuse 3.17.2 with one patch, and pyfuse3 (with one patch) against it,
# into a virtualenv.
#
# Usage: scripts/build_libfuse.sh [--check] [VENV]      (VENV: default <repo>/.venv)
#
# Why: zarrfs opens its files with FOPEN_DIRECT_IO (reads go to zarrfs, not through
# the page cache), and a program can mmap such a file MAP_SHARED (numpy.memmap,
# numpy.load(mmap_mode=...), GDAL) only when the filesystem asked the kernel for
# FUSE_DIRECT_IO_ALLOW_MMAP at FUSE_INIT. Kernels >= 6.6 offer the flag; Debian 12's
# libfuse 3.14 cannot negotiate it, libfuse 3.17 can but leaves it off, and pyfuse3
# never turns it on. scripts/libfuse-direct-io-allow-mmap.patch makes it one of
# libfuse's defaults (set only when the kernel offers it).
#
# pyfuse3 holds the GIL while libfuse copies each request in (a write's 1 MiB, twice)
# and each read's reply out, so zarrfs's decode and encode threads wait meanwhile:
# scripts/pyfuse3.patch releases it around those three C calls (the C
# source is generated again from the patched Cython by the build).
#
# The library is private so that nothing on the system changes: it goes into
# VENV/libfuse (soname libfuse3.so.4, next to the system's libfuse3.so.3), without
# fusermount3, mount.fuse3, udev rules or anything setuid (those stay the fuse3
# package's: libfuse runs the fusermount3 on PATH); pyfuse3 3.5.0 is compiled from its
# sdist against it with an rpath to VENV/libfuse/lib, so no LD_LIBRARY_PATH is needed.
# The sources are Debian trixie's fuse3 3.17.2-3 source package, fetched by apt from
# a sources list of our own (signed by the Debian archive key Debian 12 already
# trusts), with Debian's patches applied: the same libfuse Debian 13 ships. Every
# download is checked against the SHA-256 sums below, and kept in VENV/libfuse-src;
# removing the venv removes all of it.
#
# Safe to run again: when VENV/libfuse was built from these sources and this patch
# (its stamp says so) and the venv's pyfuse3 was built with its patch (its own stamp,
# which names the extension's SHA-256) and links it, nothing is done. Never falls
# back to the system's libfuse: any failure stops the script with an error.
# --check: only say whether that is so (exit status 0 when it is, 1 when not).
# Needs: gcc, libc6-dev, meson, ninja-build, pkg-config, patch, xz-utils, python3-dev,
# apt-get, and network access to deb.debian.org and the Python package index.
set -euo pipefail

say() { printf 'build_libfuse: %s\n' "$*"; }
die() { printf 'build_libfuse: ERROR: %s\n' "$*" >&2; exit 1; }

CHECK_ONLY=0
if [ "${1:-}" = "--check" ]; then
    CHECK_ONLY=1
    shift
fi
[ "$#" -le 1 ] || die "usage: $0 [--check] [VENV]"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(realpath -m "${1:-$REPO_ROOT/.venv}")"
PYTHON="$VENV/bin/python"
[ -x "$PYTHON" ] || die "$VENV is no virtualenv (create it first: python3 -m venv $VENV)"
PREFIX="$VENV/libfuse"
SRC_DIR="$VENV/libfuse-src"
PATCH="$REPO_ROOT/scripts/libfuse-direct-io-allow-mmap.patch"
PYFUSE3_PATCH="$REPO_ROOT/scripts/pyfuse3.patch"

FUSE_VERSION=3.17.2
FUSE_DEBIAN_REVISION=3
PYFUSE3_VERSION=3.5.0
# From fuse3_3.17.2-3.dsc (Debian trixie) and from PyPI.
FUSE_ORIG_SHA256=3d932431ad94e86179e5265cddde1d67aa3bb2fb09a5bd35c641f86f2b5ed06f
FUSE_DEBIAN_SHA256=eaf7a177761ae8bf99ea97619f2cccf83f169b4f000e17b6106834e69456b5a2
PYFUSE3_SHA256=88399a9494b88603230bba300f4ba9ad63fece5ed514ca3633d555a0c6a42b24
FUSE_ORIG="$SRC_DIR/fuse3_${FUSE_VERSION}.orig.tar.gz"
FUSE_DEBIAN="$SRC_DIR/fuse3_${FUSE_VERSION}-${FUSE_DEBIAN_REVISION}.debian.tar.xz"
PYFUSE3_SDIST="$SRC_DIR/pyfuse3-${PYFUSE3_VERSION}.tar.gz"

# The library only: utils=false leaves out fusermount3, mount.fuse3, the init script
# and the udev rules (and so anything setuid or outside PREFIX).
MESON_OPTIONS=(--prefix="$PREFIX" --libdir=lib --buildtype=release -Dutils=false
    -Dexamples=false -Dtests=false -Duseroot=false -Dinitscriptdir=
    -Dudevrulesdir="$PREFIX/lib/udev/rules.d")
STAMP="$PREFIX/zarrfs-build.stamp"
[ -f "$PATCH" ] || die "$PATCH is missing"
[ -f "$PYFUSE3_PATCH" ] || die "$PYFUSE3_PATCH is missing"
PATCH_SHA256="$(sha256sum "$PATCH" | cut -d' ' -f1)"
PYFUSE3_PATCH_SHA256="$(sha256sum "$PYFUSE3_PATCH" | cut -d' ' -f1)"
PYFUSE3_STAMP="$PREFIX/zarrfs-pyfuse3.stamp"
STAMP_TEXT="libfuse $FUSE_VERSION-$FUSE_DEBIAN_REVISION $FUSE_ORIG_SHA256 $FUSE_DEBIAN_SHA256
patch $PATCH_SHA256
meson ${MESON_OPTIONS[*]}"

# ------------------------------------------------------------------- checks
libfuse_is_built() {
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] \
        && [ -e "$PREFIX/lib/libfuse3.so.4" ]
}

# The file of the venv's pyfuse3 extension, found without importing it (importing
# needs trio, which the venv may not have yet); empty when pyfuse3 is not installed.
pyfuse3_extension() {
    "$PYTHON" -c 'import importlib.util as u; s = u.find_spec("pyfuse3"); print(s.origin if s else "")'
}

# What the pyfuse3 stamp says of a build with this patch: the extension's checksum
# too, so that a pyfuse3 installed over it by other means is not taken for ours.
pyfuse3_stamp_text() {
    printf 'pyfuse3 %s %s\npatch %s\nextension %s\n' "$PYFUSE3_VERSION" "$PYFUSE3_SHA256" \
        "$PYFUSE3_PATCH_SHA256" "$(sha256sum "$1" | cut -d' ' -f1)"
}

# Why the venv's pyfuse3 is not ours, patched and linked to PREFIX (nothing when it is).
pyfuse3_problem() {
    local version extension linked
    version="$("$PYTHON" -c 'from importlib.metadata import version; print(version("pyfuse3"))' \
        2>/dev/null || true)"
    if [ "$version" != "$PYFUSE3_VERSION" ]; then
        echo "the venv has pyfuse3 ${version:-(none)}, not $PYFUSE3_VERSION"
        return
    fi
    extension="$(pyfuse3_extension)"
    if [ -z "$extension" ] || [ ! -f "$extension" ]; then
        echo "pyfuse3 has no extension module"
        return
    fi
    if [ ! -f "$PYFUSE3_STAMP" ] \
        || [ "$(cat "$PYFUSE3_STAMP")" != "$(pyfuse3_stamp_text "$extension")" ]; then
        echo "the venv's pyfuse3 was not built here with $(basename "$PYFUSE3_PATCH")"
        return
    fi
    # ldd's output is read whole: grep -q on a pipe can kill ldd with SIGPIPE (pipefail).
    linked="$(ldd "$extension" 2>&1 || true)"
    if ! grep -q "libfuse3\.so\.4 => $PREFIX/lib/libfuse3\.so\.4 " <<<"$linked"; then
        echo "$extension does not load libfuse3.so.4 from $PREFIX/lib:"
        grep 'libfuse' <<<"$linked" || echo "(it links no libfuse)"
    elif grep -q 'libfuse3\.so\.3' <<<"$linked"; then
        echo "$extension also links the system's libfuse3.so.3"
    fi
}

if libfuse_is_built && [ -z "$(pyfuse3_problem)" ]; then
    say "libfuse $FUSE_VERSION (with $(basename "$PATCH")) already in $PREFIX; pyfuse3 $PYFUSE3_VERSION (with $(basename "$PYFUSE3_PATCH")) links it"
    exit 0
fi
if [ "$CHECK_ONLY" = 1 ]; then
    libfuse_is_built || say "$PREFIX holds no libfuse built from these sources and patch"
    problem="$(pyfuse3_problem)"
    [ -z "$problem" ] || say "$problem"
    die "$VENV needs its libfuse and pyfuse3 built: run $0 $VENV"
fi

missing=()
for tool in gcc meson ninja pkg-config patch xz apt-get sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ "${#missing[@]}" -eq 0 ] \
    || die "missing programs: ${missing[*]} (scripts/install.sh installs them)"

mkdir -p "$SRC_DIR"
LOG="$SRC_DIR/build.log"
: >"$LOG"
# Runs a command with its output in the log; on failure the log's end is shown.
logged() {
    printf '+ %s\n' "$*" >>"$LOG"
    if ! "$@" >>"$LOG" 2>&1; then
        tail -n 40 "$LOG" >&2
        die "failed: $* (whole output: $LOG)"
    fi
}

sha256_is() { [ -f "$2" ] && [ "$(sha256sum "$2" | cut -d' ' -f1)" = "$1" ]; }

# ----------------------------------------------------------------- sources
# Debian trixie's source package: libfuse 3.17.2 as released, plus Debian's fixes.
# apt works in SRC_DIR/apt with a sources list of its own, so the system's apt
# configuration and lists are neither used nor changed; it checks what it fetches
# against trixie's signed Release file, and we check the sums once more.
if ! sha256_is "$FUSE_ORIG_SHA256" "$FUSE_ORIG" || ! sha256_is "$FUSE_DEBIAN_SHA256" "$FUSE_DEBIAN"; then
    say "fetching Debian trixie's fuse3 $FUSE_VERSION-$FUSE_DEBIAN_REVISION source package into $SRC_DIR"
    rm -f "$FUSE_ORIG" "$FUSE_DEBIAN"
    APT_DIR="$SRC_DIR/apt"
    rm -rf "$APT_DIR"
    mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
    echo "deb-src http://deb.debian.org/debian trixie main" >"$APT_DIR/sources.list"
    # Sandbox::User: apt's _apt user may not enter the venv; we download as ourselves.
    APT=(apt-get -q -o Dir::Etc::SourceList="$APT_DIR/sources.list" -o Dir::Etc::SourceParts=-
        -o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache"
        -o APT::Sandbox::User="$(id -un)")
    logged "${APT[@]}" update
    (cd "$SRC_DIR" && logged "${APT[@]}" source --download-only \
        "fuse3=$FUSE_VERSION-$FUSE_DEBIAN_REVISION")
    rm -rf "$APT_DIR"  # 10 MB of package lists, needed for this one fetch
fi
sha256_is "$FUSE_ORIG_SHA256" "$FUSE_ORIG" || die "$FUSE_ORIG: missing, or wrong SHA-256"
sha256_is "$FUSE_DEBIAN_SHA256" "$FUSE_DEBIAN" || die "$FUSE_DEBIAN: missing, or wrong SHA-256"

if ! sha256_is "$PYFUSE3_SHA256" "$PYFUSE3_SDIST"; then
    say "fetching pyfuse3 $PYFUSE3_VERSION's sdist into $SRC_DIR"
    rm -f "$PYFUSE3_SDIST"
    logged "$PYTHON" -m pip download --disable-pip-version-check --no-deps \
        --no-binary pyfuse3 "pyfuse3==$PYFUSE3_VERSION" -d "$SRC_DIR"
fi
sha256_is "$PYFUSE3_SHA256" "$PYFUSE3_SDIST" || die "$PYFUSE3_SDIST: missing, or wrong SHA-256"

# ----------------------------------------------------------------- libfuse
WORK="$SRC_DIR/work"
if libfuse_is_built; then
    say "libfuse $FUSE_VERSION (with $(basename "$PATCH")) already in $PREFIX"
else
    say "building libfuse $FUSE_VERSION with Debian's patches and $(basename "$PATCH") into $PREFIX"
    rm -rf "$WORK" "$PREFIX"
    mkdir -p "$WORK"
    tar -xzf "$FUSE_ORIG" -C "$WORK"
    tar -xJf "$FUSE_DEBIAN" -C "$WORK"
    SOURCE="$WORK/fuse-$FUSE_VERSION"
    [ -d "$SOURCE" ] || die "$FUSE_ORIG has no fuse-$FUSE_VERSION directory"
    while read -r name _; do
        case "$name" in '' | '#'*) continue ;; esac
        logged patch -d "$SOURCE" -p1 --forward --fuzz=0 -i "$WORK/debian/patches/$name"
    done <"$WORK/debian/patches/series"
    logged patch -d "$SOURCE" -p1 --forward --fuzz=0 -i "$PATCH"
    grep -q 'LL_SET_DEFAULT(1, FUSE_CAP_DIRECT_IO_ALLOW_MMAP);' "$SOURCE/lib/fuse_lowlevel.c" \
        || die "$(basename "$PATCH") did not apply"
    logged meson setup "$WORK/build" "$SOURCE" "${MESON_OPTIONS[@]}"
    logged ninja -C "$WORK/build"
    logged meson install -C "$WORK/build" --no-rebuild
    [ -e "$PREFIX/lib/libfuse3.so.4" ] || die "the build left no $PREFIX/lib/libfuse3.so.4"
    [ "$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --modversion fuse3)" = "$FUSE_VERSION" ] \
        || die "$PREFIX/lib/pkgconfig/fuse3.pc does not say $FUSE_VERSION"
    printf '%s\n' "$STAMP_TEXT" >"$STAMP"
    rm -rf "$WORK"
fi

# ----------------------------------------------------------------- pyfuse3
# pkg-config finds our fuse3.pc before the system's; the rpath makes the extension
# load VENV/libfuse/lib/libfuse3.so.4 whatever LD_LIBRARY_PATH says. No pip cache: a
# wheel pip built earlier against the system's libfuse must not come back.
if [ -z "$(pyfuse3_problem)" ]; then
    say "pyfuse3 $PYFUSE3_VERSION already links $PREFIX/lib/libfuse3.so.4"
else
    say "compiling pyfuse3 $PYFUSE3_VERSION with $(basename "$PYFUSE3_PATCH") against $PREFIX into $VENV"
    rm -f "$PYFUSE3_STAMP"
    PYFUSE3_WORK="$SRC_DIR/pyfuse3-work"
    rm -rf "$PYFUSE3_WORK"
    mkdir -p "$PYFUSE3_WORK" "$SRC_DIR/tmp"
    tar -xzf "$PYFUSE3_SDIST" -C "$PYFUSE3_WORK"
    PYFUSE3_SOURCE="$PYFUSE3_WORK/pyfuse3-$PYFUSE3_VERSION"
    [ -d "$PYFUSE3_SOURCE" ] || die "$PYFUSE3_SDIST has no pyfuse3-$PYFUSE3_VERSION directory"
    logged patch -d "$PYFUSE3_SOURCE" -p1 --forward --fuzz=0 -i "$PYFUSE3_PATCH"
    # The sdist ships the C source Cython made from the unpatched code: made anew.
    rm -f "$PYFUSE3_SOURCE/src/pyfuse3/__init__.c"
    PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" LDFLAGS="-Wl,-rpath,$PREFIX/lib" \
        SETUPTOOLS_SCM_PRETEND_VERSION="$PYFUSE3_VERSION" TMPDIR="$SRC_DIR/tmp" \
        logged "$PYTHON" -m pip install --disable-pip-version-check \
        --no-cache-dir --force-reinstall --no-deps "$PYFUSE3_SOURCE"
    rm -rf "$SRC_DIR/tmp" "$PYFUSE3_WORK"
    extension="$(pyfuse3_extension)"
    [ -n "$extension" ] && [ -f "$extension" ] || die "pyfuse3 installed no extension module"
    grep -q 'fuse_session_receive_buf' "$extension" || die "$extension is no pyfuse3 build"
    pyfuse3_stamp_text "$extension" >"$PYFUSE3_STAMP"
fi
problem="$(pyfuse3_problem)"
[ -z "$problem" ] || die "$problem"
say "pyfuse3 $PYFUSE3_VERSION (with $(basename "$PYFUSE3_PATCH")) in $VENV links libfuse $FUSE_VERSION from $PREFIX/lib"
