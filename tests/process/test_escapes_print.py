"""What ``zarrfs tree`` and ``zarrfs check`` print from a store is shown, never obeyed.

Names, keys, reasons and codec settings come from the store; a terminal acts on the
control characters they may hold (an OSC sequence retitles the window, CSI moves
the cursor or clears the screen, a newline fakes a line such as ``ok: ...``). Both
commands write every line through ``output.printable``: C0, DEL, C1, the line and
paragraph separators, the bidirectional formatting characters and lone surrogates
come out as escapes (``\\x1b``, ``\\n``, ``\\u202e``, ``\\udcff``). So the only
control characters in their output are the newlines ending their own lines.
"""

from __future__ import annotations

import json
import subprocess
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.mounting import zarrfs_command
from tests.support.stores import v2_zarray
from zarrfs.commands.check import check_command
from zarrfs.commands.output import printable
from zarrfs.commands.tree import tree_command
from zarrfs.commands.walk import walk
from zarrfs.stores.directory import DirectoryStore

BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Pieces a hostile name is made of, besides any text.
FRAGMENTS = [
    "\x1b]0;owned\x07",  # OSC: window title
    "\x1b[2J",  # CSI: clear the screen
    "\x9b31m",  # C1 CSI
    "\nok: 0 arrays",
    "\r",
    "\t",
    "\x00",
    "\x7f",
    "\x85",
    "\u2028",
    "\u202e",
    "\u2066",
    "\udcff",  # an undecodable byte of a file name
    "\ud800",
    "\\x1b",
]


def unprintable(char: str) -> bool:
    """A character a terminal acts on (defined apart from the code under test)."""
    return unicodedata.category(char) in {"Cc", "Cs", "Zl", "Zp"} or char in BIDI


def assert_printable(output: str) -> None:
    for line in output.split("\n"):
        bad = [c for c in line if unprintable(c)]
        assert not bad, (line, bad)


names = (
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), min_size=1, max_size=3)
    .map("".join)
    .filter(lambda n: "/" not in n and n not in ("", ".", ".."))
)
hostile_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=3).map(
    "".join
)


@st.composite
def hierarchies(draw: st.DrawFn) -> dict[str, dict]:
    """A consolidated v2 hierarchy of groups and arrays whose names, data types,
    codec ids and attributes may hold anything."""
    metadata: dict[str, dict] = {".zgroup": {"zarr_format": 2}}
    for group in draw(st.lists(names, min_size=1, max_size=3, unique=True)):
        metadata[f"{group}/.zgroup"] = {"zarr_format": 2}
        for array in draw(st.lists(names, max_size=3, unique=True)):
            compressor = draw(st.one_of(st.none(), hostile_text.map(lambda t: {"id": t})))
            metadata[f"{group}/{array}/.zarray"] = {
                "zarr_format": 2,
                "shape": [4],
                "chunks": [2],
                "dtype": draw(st.one_of(st.just("<f4"), hostile_text)),
                "compressor": compressor,
                "fill_value": 0,
                "order": "C",
                "filters": None,
            }
            attrs = {"_ARRAY_DIMENSIONS": [array], "units": draw(hostile_text)}
            metadata[f"{group}/{array}/.zattrs"] = draw(st.one_of(st.just(attrs), hostile_text))
    return metadata


def write_store(root: Path, metadata: dict[str, dict]) -> None:
    """``metadata`` consolidated at ``root``; where the file system allows the names,
    each array also gets a chunk too short to be one (a ``corrupt:`` line)."""
    root.mkdir()
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    document = {"zarr_consolidated_format": 1, "metadata": metadata}
    (root / ".zmetadata").write_text(json.dumps(document))
    for key in metadata:
        if key.endswith("/.zarray"):
            try:
                directory = root / key.removesuffix("/.zarray")
                directory.mkdir(parents=True, exist_ok=True)
                (directory / "0").write_bytes(b"bad")
            except (OSError, ValueError, UnicodeEncodeError):
                continue  # (a NUL or a surrogate no file name can hold)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(metadata=hierarchies())
def test_nothing_printed_holds_a_control_character(
    tmp_path_factory: pytest.TempPathFactory, metadata: dict[str, dict]
) -> None:
    root = tmp_path_factory.mktemp("printed") / "store.zarr"
    write_store(root, metadata)
    runner = CliRunner()
    nodes = list(walk(DirectoryStore(str(root))).root.nodes())

    tree = runner.invoke(tree_command, [str(root)])
    assert tree.exit_code in (0, 1), tree.output
    assert_printable(tree.stdout)
    assert_printable(tree.stderr)
    # one line per node, whatever newlines the names hold
    assert len(tree.stdout.splitlines()) == len(nodes)

    check = runner.invoke(check_command, ["--no-progress", "--jobs", "2", str(root)])
    assert check.exit_code in (0, 1), check.output
    assert_printable(check.stdout)
    assert_printable(check.stderr)
    last = check.stdout.splitlines()[-1] if check.stdout else check.stderr
    assert last.startswith(("ok: ", "FAILED: ", "zarrfs: error: ")), check.output


@settings(max_examples=500)
@given(st.text() | st.lists(st.sampled_from(FRAGMENTS)).map("".join))
def test_printable_escapes_exactly_what_a_terminal_acts_on(text: str) -> None:
    shown = printable(text)
    assert not any(unprintable(c) for c in shown)
    if not any(unprintable(c) for c in text):
        assert shown == text


def test_escapes_read_as_the_characters_they_stand_for() -> None:
    assert printable("a\x1b]0;t\x07\nb\t\x7f\x9b\u202e\udcff") == (
        "a\\x1b]0;t\\x07\\nb\\t\\x7f\\x9b\\u202e\\udcff"
    )


def test_a_directory_store_with_hostile_file_names(tmp_path: Path) -> None:
    """Through the real commands, bytes as a terminal receives them."""
    root = tmp_path / "store.zarr"
    root.mkdir()
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    title, fake = "\x1b]0;owned\x07", "x\nok: 9 arrays"
    for name in (title, fake):
        array = root / name
        array.mkdir()
        (array / ".zarray").write_text(json.dumps(v2_zarray([4], [2], "<i2")))
        (array / "0").write_bytes(b"bad")  # 3 bytes, not 4: corrupt
    for command, expected in (
        ("tree", ["/", "├── \\x1b]0;owned\\x07 (4,) <i2 chunks=(2,) codecs=[]"]),
        ("check", ["corrupt: \\x1b]0;owned\\x07/0: "]),
    ):
        result = subprocess.run(
            zarrfs_command(command, str(root)), capture_output=True, timeout=60, check=False
        )
        assert result.returncode == (0 if command == "tree" else 1), result
        for stream in (result.stdout, result.stderr):
            assert not [b for b in stream if (b < 0x20 and b != 0x0A) or b == 0x7F], stream
        lines = result.stdout.decode().splitlines()
        assert all(any(line.startswith(e) for line in lines) for e in expected), lines
        assert not any(line.startswith("ok: 9") for line in lines), lines
        assert any("x\\nok: 9 arrays" in line for line in lines), lines
