"""Listing a large consolidated hierarchy through a real mount, in bounded memory.

Requirement (hostile input: the consolidated document may be 128 MiB): the daemon
keeps a few hundred bytes per listed node, the document itself, and the parsed
metadata of a bounded number of recently used nodes; everything else about a node
(its parsed metadata, its documents as shown, its array state, its files) is made
again when asked. ``ls -R`` then ``find`` with a ``stat`` of every entry of a
hierarchy of 100 000 arrays touches every node: kept whole, those nodes would take
the daemon past 1 GiB.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.mounting import mounted, peak_rss

GROUPS = 100
ARRAYS_PER_GROUP = 1_000
ARRAYS = GROUPS * ARRAYS_PER_GROUP
MEMORY_CAP = 2 << 30
RSS_BOUND = 300 << 20  # docs/semantics.md, "Limits and hostile input"
# An array directory: the directory, .zarray, array.raw, array.npy, array.hdr,
# array.nhdr and info.
PER_ARRAY = 7


def zarray(rows: int) -> dict[str, object]:
    return {
        "chunks": [10],
        "compressor": None,
        "dtype": "<f4",
        "fill_value": 0.0,
        "filters": None,
        "order": "C",
        "shape": [rows],
        "zarr_format": 2,
    }


def write_consolidated(root: Path, groups: int, arrays: int) -> None:
    """A root group holding ``groups`` groups of ``arrays`` arrays each, described by
    one ``.zmetadata`` on one line (as zarr-python 3 writes it); written as JSON
    directly, since creating the arrays with zarr-python would take minutes. No
    array has a chunk, and only the root's own documents exist besides it: the
    hierarchy is listed from ``.zmetadata`` alone."""
    root.mkdir(parents=True)
    metadata: dict[str, object] = {".zgroup": {"zarr_format": 2}}
    for g in range(groups):
        metadata[f"g{g}/.zgroup"] = {"zarr_format": 2}
        for a in range(arrays):
            metadata[f"g{g}/a{a}/.zarray"] = zarray(100 + a)
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    document = {"metadata": metadata, "zarr_consolidated_format": 1}
    (root / ".zmetadata").write_text(json.dumps(document))


def test_a_hundred_thousand_arrays_are_listed_and_stated_in_bounded_memory(
    tmp_path: Path,
) -> None:
    root = tmp_path / "big.zarr"
    write_consolidated(root, GROUPS, ARRAYS_PER_GROUP)
    assert (root / ".zmetadata").stat().st_size > 15_000_000
    with mounted(root, "--read-only", log_dir=tmp_path, memory_limit=MEMORY_CAP) as m:
        subprocess.run(
            ["ls", "-R", str(m.path)], stdout=subprocess.DEVNULL, check=True, timeout=600
        )
        found = subprocess.run(
            ["find", str(m.path), "-printf", "%s %P\\n"],  # %s: a stat of every entry
            capture_output=True,
            check=True,
            timeout=600,
        ).stdout.decode()
        last = m / f"g{GROUPS - 1}" / f"a{ARRAYS_PER_GROUP - 1}"
        shown = json.loads((last / ".zarray").read_bytes())
        assert m.process.poll() is None, "the daemon keeps serving"
        peak = peak_rss(m.process)
    sizes = dict(reversed(line.split(" ", 1)) for line in found.splitlines() if " " in line)
    assert sum(p.endswith("/array.raw") for p in sizes) == ARRAYS
    # Each group: itself, its .zgroup and group.nc, then its arrays' entries.
    assert len([p for p in sizes if p.startswith("g")]) == GROUPS * (
        3 + PER_ARRAY * ARRAYS_PER_GROUP
    )
    assert sizes["g7/a123/array.raw"] == str((100 + 123) * 4)
    assert shown == zarray(100 + ARRAYS_PER_GROUP - 1)
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MiB"
