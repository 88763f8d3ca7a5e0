"""``info``'s attributes and conventions rows (views/info.py): what the conventions
found, as printable lines."""

from __future__ import annotations

from tests.support.info import field, meta_of
from tests.support.stores import v2_zarray
from zarrfs.formats.conventions import Conventions, Crs, TimeAxis
from zarrfs.formats.conventions.cf import known_wkt
from zarrfs.views.info import MAX_ATTRIBUTE_ROWS, conventions_rows, info_text

FOUND = Conventions(
    crs=Crs(known_wkt(4326), 4326),
    geotransform=(-20.0, 0.25, 0.0, 90.0, 0.0, -0.25),
    nodata=-32768,
    scale_factor=0.01,
    add_offset=273.15,
    units="K",
    long_name="2 metre temperature",
    band_axis=0,
    time=TimeAxis(0, "time", "days since 2000-01-01", "noleap"),
    found=("CF-1.8", "GeoTransform"),
)


def test_conventions_rows() -> None:
    assert dict(conventions_rows(FOUND)) == {
        "Conventions": "CF-1.8, GeoTransform",
        "CRS": f"EPSG:4326, WGS 84, WKT of {len(known_wkt(4326) or '')} characters",
        "Geotransform": "-20.0 0.25 0.0 90.0 0.0 -0.25",
        "Nodata": "-32768",
        "Scale factor": "0.01",
        "Add offset": "273.15",
        "Units": "K",
        "Long name": "2 metre temperature",
        "Time axis": "dimension 0 (time): days since 2000-01-01, noleap",
        "Band axis": "dimension 0",
    }
    assert conventions_rows(Conventions()) == []
    coordinates = dict(conventions_rows(Conventions(x_coordinate="lon", y_coordinate="lat")))
    assert coordinates == {"Coordinates": "x lon, y lat"}


def test_attributes_one_per_line_printable_and_bounded() -> None:
    attrs = {"units": "K", "bell\x07\n": "a\nb", "n": [1, 2]}
    attrs.update({f"a{i}": i for i in range(100)})
    meta = meta_of("a", v2_zarray([2], [2]), attrs)
    text = info_text(meta, None, 0, FOUND)
    assert text.isprintable() or all(line.isprintable() for line in text.splitlines())
    assert field(text, "Attributes") == str(len(attrs))
    assert field(text, "units") == '"K"'
    assert '"bell\\u0007\\n"' in text and '"a\\nb"' in text
    assert field(text, "...") == f"{len(attrs) - MAX_ATTRIBUTE_ROWS} more"
    assert field(text, "CRS").startswith("EPSG:4326")
    assert "Attributes" not in info_text(meta_of("b", v2_zarray([2], [2])), None, 0)
