#!/usr/bin/env bash
# Install zarrfs (scripts/install.sh), mount the example store data/example.zarr
# read-only at MOUNTPOINT (default /tmp/zarrfs-demo) and take a short tour.
# The filesystem stays mounted afterwards; the last line says how to unmount.
#
# usage: bash scripts/demo.sh [MOUNTPOINT]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$(pwd)"
MNT="$(realpath -m "${1:-/tmp/zarrfs-demo}")"
STORE="$REPO_ROOT/data/example.zarr"
ZARRFS="$REPO_ROOT/.venv/bin/zarrfs"
PY="$REPO_ROOT/.venv/bin/python"

bash "$REPO_ROOT/scripts/install.sh"

is_mounted() { findmnt --mountpoint "$1" >/dev/null 2>&1; }

# A mount left over from an earlier run (possibly with a dead daemon).
if is_mounted "$MNT"; then
    echo "demo: unmounting the previous mount at $MNT"
    "$ZARRFS" umount "$MNT" 2>/dev/null || fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
fi
mkdir -p "$MNT"

echo "demo: mounting $STORE at $MNT (read-only, as without --rw)"
"$ZARRFS" mount "$STORE" "$MNT"

run() {
    printf '\n$ %s\n' "$*"
    "$@"
}

run ls -la "$MNT"
run ls -la "$MNT/foo/bar"
run cat "$MNT/foo/bar/.zarray"
echo

printf '\n# first values of foo/bar (float32, shape 100 x 60) through array.npy and array.raw\n'
"$PY" -c '
import sys
import numpy as np
a = np.load(sys.argv[1] + "/array.npy", mmap_mode="r")
print("np.load(array.npy, mmap_mode=\"r\"):", a.dtype, a.shape, a[0, :4])
r = np.fromfile(sys.argv[1] + "/array.raw", dtype="<f4").reshape(100, 60)
print("np.fromfile(array.raw):           ", r.dtype, r.shape, r[0, :4])
print("identical:", bool((a == r).all()))
' "$MNT/foo/bar"

printf '\n# the first 16 bytes of foo/bar/array.raw are its first four float32 values\n'
printf '$ dd if=%s bs=16 count=1 status=none | od -A d -t f4\n' "$MNT/foo/bar/array.raw"
dd if="$MNT/foo/bar/array.raw" bs=16 count=1 status=none | od -A d -t f4

printf '\n# weather/temperature is int16 (time, lat, lon), in tenths of a degree C\n'
printf '$ dd if=%s bs=2 count=12 status=none | od -A d -t d2\n' "$MNT/weather/temperature/array.raw"
dd if="$MNT/weather/temperature/array.raw" bs=2 count=12 status=none | od -A d -t d2

printf '\n# every array has an info file, like zarr-python'"'"'s Array.info\n'
printf '$ cat %s\n' "$MNT/weather/temperature/info"
cat "$MNT/weather/temperature/info"

cat <<EOF

demo: $STORE is mounted read-only at $MNT
demo: unmount with: $ZARRFS umount $MNT
EOF
