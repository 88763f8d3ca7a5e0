"""Stores in the layouts before v2 (pre-v1 ``__zmeta__``, v1 ``meta``), written by hand:
a v2 root group holding one good array of each, and damaged arrays whose document is
the good one with exactly one change (``CASES``), or whose blosc header lies.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np

DTYPE = "<i4"
SHAPE, CHUNKS = (10, 12), (4, 5)  # edge chunks on both axes
VALUES = (np.arange(math.prod(SHAPE), dtype=DTYPE).reshape(SHAPE) * 7 - 300).astype(DTYPE)
BLOSC = {"cname": "lz4", "clevel": 5, "shuffle": 1}
GOOD = ("good_v0", "good_v1")
BAD = "broken"

Index = tuple[int, ...]
Document = dict[str, Any]


# -- writing stores by hand ----------------------------------------------------------------


def v0_document(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Document:
    """A pre-v1 ``__zmeta__`` as zarr 0.4 wrote it (persistence.rst)."""
    return {
        "chunks": list(chunks),
        **BLOSC,
        "dtype": DTYPE,
        "fill_value": 0,
        "shape": list(shape),
    }


def v1_document(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Document:
    """A v1 ``meta`` as zarr 1.x wrote it (spec_v1.rst)."""
    return {
        "chunks": list(chunks),
        "compression": "blosc",
        "compression_opts": dict(BLOSC),
        "dtype": DTYPE,
        "fill_value": 0,
        "order": "C",
        "shape": list(shape),
        "zarr_format": 1,
    }


@dataclass(frozen=True)
class Layout:
    name: str
    meta_key: str
    attrs_key: str
    chunk_prefix: str
    chunk_suffix: str
    document: Callable[[tuple[int, ...], tuple[int, ...]], Document]
    required: tuple[str, ...]  # the keys the spec says MUST be present

    def chunk_key(self, index: Index) -> str:
        return self.chunk_prefix + ".".join(str(i) for i in index) + self.chunk_suffix


V0 = Layout(
    "pre-v1",
    "__zmeta__",
    "__zattr__",
    "__zdata__/",
    ".blosc",
    v0_document,
    ("shape", "chunks", "dtype", "fill_value", "cname", "clevel", "shuffle"),
)
V1 = Layout(
    "v1",
    "meta",
    "attrs",
    "",
    "",
    v1_document,
    (
        "zarr_format",
        "shape",
        "chunks",
        "dtype",
        "compression",
        "compression_opts",
        "fill_value",
        "order",
    ),
)


def dump(doc: Any) -> bytes:
    return json.dumps(doc, indent=4, sort_keys=True).encode()


def chunk_indices(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Iterator[Index]:
    return itertools.product(*(range(-(-s // c)) for s, c in zip(shape, chunks)))


def chunk_of(values: np.ndarray, index: Index, chunks: tuple[int, ...]) -> np.ndarray:
    """The full-shape chunk at ``index``; the part overhanging the array is zero."""
    box = np.zeros(chunks, dtype=values.dtype)
    part = values[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks))]
    box[tuple(slice(0, n) for n in part.shape)] = part
    return box


def write_array(
    directory: Path,
    layout: Layout,
    values: np.ndarray,
    chunks: tuple[int, ...],
    document: bytes | None = None,
) -> None:
    """An array in ``layout`` with every chunk stored, blosc-compressed with numcodecs."""
    directory.mkdir(parents=True)
    meta = dump(layout.document(values.shape, chunks)) if document is None else document
    (directory / layout.meta_key).write_bytes(meta)
    (directory / layout.attrs_key).write_text("{}")
    codec = numcodecs.Blosc(**BLOSC)
    for index in chunk_indices(values.shape, chunks):
        path = directory / layout.chunk_key(index)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(bytes(codec.encode(chunk_of(values, index, chunks))))


def claim_nbytes(chunk_file: Path, nbytes: int) -> None:
    """Rewrite the blosc header's nbytes field (bytes 4..8, little-endian uint32)."""
    data = bytearray(chunk_file.read_bytes())
    assert len(data) >= 16 and data[0] in (1, 2), "not a blosc frame"
    data[4:8] = nbytes.to_bytes(4, "little")
    chunk_file.write_bytes(bytes(data))


def write_root_with_good_arrays(root: Path) -> None:
    root.mkdir(exist_ok=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    write_array(root / "good_v0", V0, VALUES, CHUNKS)
    write_array(root / "good_v1", V1, VALUES, CHUNKS)


# -- the damaged documents -----------------------------------------------------------------

Mutation = Callable[[Document], bytes]


def truncated(doc: Document) -> bytes:
    text = dump(doc)
    return text[: len(text) // 2]


def empty(doc: Document) -> bytes:
    return b""


def not_utf8(doc: Document) -> bytes:
    return dump(doc).replace(b"{", b'{\n    "note": "\xff\xfe",', 1)


def not_an_object(doc: Document) -> bytes:
    return dump(sorted(doc.items()))


def without(key: str) -> Mutation:
    return lambda doc: dump({k: v for k, v in doc.items() if k != key})


def setting(key: str, value: Any) -> Mutation:
    return lambda doc: dump({**doc, key: value})


def setting_opts(key: str, value: Any) -> Mutation:
    return lambda doc: dump({**doc, "compression_opts": {**doc["compression_opts"], key: value}})


def cases_for(layout: Layout) -> dict[str, tuple[Layout, Mutation]]:
    mutations: dict[str, Mutation] = {
        "truncated-json": truncated,
        "empty": empty,
        "not-utf8": not_utf8,
        "not-an-object": not_an_object,
        **{f"missing-{key}": without(key) for key in layout.required},
        "chunk-zero": setting("chunks", [CHUNKS[0], 0]),
        "chunk-negative": setting("chunks", [-CHUNKS[0], CHUNKS[1]]),
        # 2**61 elements fit an int64, their 2**63 bytes do not
        "nbytes-2to63": setting("shape", [2**31, 2**30]),
        "nbytes-2to82": setting("shape", [2**40, 2**40]),
    }
    if layout is V0:
        mutations["unknown-cname"] = setting("cname", "nosuchcodec")
    else:
        mutations["unknown-compression"] = setting("compression", "nosuchcodec")
        mutations["unknown-blosc-cname"] = setting_opts("cname", "nosuchcodec")
    return {f"{layout.name}-{label}": (layout, m) for label, m in mutations.items()}


CASES = {**cases_for(V0), **cases_for(V1)}


def write_bad_array(directory: Path, case: str) -> None:
    layout, mutate = CASES[case]
    write_array(directory, layout, VALUES, CHUNKS, mutate(layout.document(SHAPE, CHUNKS)))
