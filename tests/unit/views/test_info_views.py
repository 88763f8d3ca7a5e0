"""``info``'s "Views" rows (views/info.py): the files an array has for legacy tools,
and why each it lacks is missing."""

from __future__ import annotations

import dataclasses

from tests.support.info import field, meta_of
from tests.support.stores import v2_zarray
from zarrfs.formats.conventions import Axis, Conventions
from zarrfs.views.info import info_text, view_rows

BANDS = Conventions(band_axis=0)


def rows(shape: list[int], dtype: str, found: Conventions | None = None) -> dict[str, str]:
    chunks = [max(n, 1) for n in shape]
    return dict(view_rows(meta_of("a", v2_zarray(shape, chunks, dtype)), found))


def test_every_view_of_a_plain_array() -> None:
    assert rows([3, 4], "<f4") == {
        "Views": "array.raw, array.npy, array.hdr, array.nhdr, array.tif"
    }


def test_why_a_view_is_missing() -> None:
    assert rows([3], "<u2") == {
        "Views": "array.raw, array.npy, array.hdr, array.nhdr",
        "No array.tif": "fewer than 2 dimensions",
    }
    assert rows([3, 4], "|b1") == {
        "Views": "array.raw, array.npy",
        "No array.hdr": "ENVI has no data type for |b1",
        "No array.nhdr": "NRRD has no type for |b1",
        "No array.tif": "TIFF has no sample type for |b1",
        "Not in group.nc": "data type |b1 has no netCDF classic type",
    }
    assert rows([3, 4], "|i1")["No array.hdr"] == "ENVI has no data type for |i1"
    assert rows([3, 4], "<c8")["No array.nhdr"] == "NRRD has no type for <c8"


def test_a_header_too_large_or_too_many_bands() -> None:
    assert "exceed" in rows([10**6, 1, 1], "|u1")["No array.tif"]
    assert (
        rows([70000, 1, 1], "|u1", BANDS)["No array.tif"] == "70000 bands, more than TIFF's 65535"
    )
    # An axis of length 0: an empty file, which a write may fill.
    assert "No array.tif" not in rows([0, 3], "<f4")


def test_volumes_of_an_image() -> None:
    axes = (Axis("c", "channel"), Axis("y", "space"), Axis("x", "space"))
    found = dataclasses.replace(Conventions(), axes=axes)
    assert rows([2, 3, 4], "<u2", found)["Views"].endswith("array.tif, volumes/")


def test_info_shows_the_rows() -> None:
    meta = meta_of("a", v2_zarray([5], [5], "|b1"))
    text = info_text(meta, None, 0)
    assert field(text, "Views") == "array.raw, array.npy"
    assert field(text, "No array.tif") == "TIFF has no sample type for |b1"


def test_no_views_without_fixed_size_elements() -> None:
    meta = meta_of("a", v2_zarray([3], [3], "|O", filters=[{"id": "vlen-utf8"}]))
    assert view_rows(meta, None) == [("Views", "none: dtype object has no fixed element size")]


def test_an_array_its_group_file_cannot_hold_says_so() -> None:
    assert rows([3, 4], "<f2")["Not in group.nc"] == "data type <f2 has no netCDF classic type"
    assert rows([0, 4], "<f4")["Not in group.nc"] == "an axis of length 0 (netCDF's unlimited one)"
    assert "Not in group.nc" not in rows([3, 4], "<u8")  # CDF-5 holds it
