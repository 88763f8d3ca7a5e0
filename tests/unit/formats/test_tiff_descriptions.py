"""Band descriptions in GDAL_METADATA (formats/tiff/geo.py): the dates of a time
axis, read when the header is, in room of a size fixed from metadata, as GDAL
(Debian's gdal-bin) reads them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from zarrfs.formats.conventions import Conventions
from zarrfs.formats.conventions.cf import TIME_LABEL_WIDTH
from zarrfs.formats.tiff import TiffLayout, geo_tags, header_bytes, tiff_layout
from zarrfs.formats.tiff.geo import GDAL_METADATA, MAX_METADATA_BANDS, metadata_xml

DATES = ["2000-01-01T00:00:00", "2000-02-01T00:00:00", "NaT".ljust(TIME_LABEL_WIDTH)]
SHAPE = (3, 4, 5)


def layout_for(conventions: Conventions) -> TiffLayout:
    geo = geo_tags(conventions, bands=SHAPE[0], description_width=TIME_LABEL_WIDTH)
    found = tiff_layout(np.dtype("<i2"), SHAPE, bands=True, geo=geo)
    assert isinstance(found, TiffLayout), found
    return found


def metadata_entry(layout: TiffLayout, dates: list[str] | None) -> bytes:
    entries = layout.geo.entries(None, dates)
    values = [e[3] for e in entries if e[0] == GDAL_METADATA]
    assert len(values) == 1 and isinstance(values[0], bytes)
    return values[0]


@pytest.mark.parametrize(
    "conventions",
    [Conventions(), Conventions(scale_factor=0.01, add_offset=273.15, units="K", long_name="t")],
    ids=["bare", "packed"],
)
def test_descriptions_have_room_of_a_fixed_size(conventions: Conventions) -> None:
    layout = layout_for(conventions)
    without = metadata_entry(layout, None)
    with_dates = metadata_entry(layout, DATES)
    assert len(without) == len(with_dates) == layout.geo.metadata_size
    assert b"2000-02-01T00:00:00</Item>" in with_dates and b"NaT</Item>" in with_dates
    assert b"description" not in without
    # Dates of the wrong count are left out, never a larger entry.
    assert metadata_entry(layout, DATES[:2]) == without


def test_no_room_without_bands_or_past_the_bound() -> None:
    assert geo_tags(Conventions(), bands=1, description_width=19).metadata_size == 0
    many = MAX_METADATA_BANDS + 1
    assert geo_tags(Conventions(), bands=many, description_width=19).metadata is None
    assert metadata_xml(Conventions(), 2, ["a", "b"]) is not None


def test_gdal_reads_the_dates_as_band_descriptions(tmp_path: Path) -> None:
    conventions = Conventions(scale_factor=0.5, long_name="air & sea")
    layout = layout_for(conventions)
    data = np.arange(60, dtype="<i2").reshape(SHAPE)
    path = tmp_path / "a.tif"
    path.write_bytes(header_bytes(layout, 0, layout.data_offset, None, DATES) + data.tobytes())
    result = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert [b["description"] for b in info["bands"]] == [d.strip() for d in DATES]
    assert [b["scale"] for b in info["bands"]] == [0.5] * 3
    assert info["metadata"][""]["long_name"] == "air + sea"
