"""``zarrfs tree STORE``: the hierarchy, one line per group and array.

Drawn as zarr-python's ``Group.tree()`` draws it (``├──``, ``└──``, ``│``), the root
as ``/``; each array line adds its shape, data type, chunk shape (with the shard shape
of a sharded v3 array: ``chunks`` is then the inner chunk) and codecs, in the
document's own words. The hierarchy is listed as the mount lists it (zarrfs/commands/walk.py):
from consolidated metadata where the root holds it, one document read for the whole
tree. A node whose metadata cannot be read is shown as such, its reason on stderr,
and the exit status is then 1. Every line is printed through output.printable: names
and codec settings come from the store.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from zarrfs.commands.output import echo, open_and_walk
from zarrfs.commands.walk import Node
from zarrfs.formats.limits import clip
from zarrfs.formats.metadata.describe import codec_fields, type_text, written_type
from zarrfs.formats.model import ArrayMeta

# A line is for reading: codec configurations chosen by the store are cut here.
MAX_CODECS_TEXT = 1000


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict) and ("name" in value or "id" in value):
        return codec_text(value)
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def codec_text(codec: Any) -> str:
    """One codec as ``name(key=value, ...)``: v3's ``{"name", "configuration"}`` or a
    numcodecs ``{"id", ...}``; the chunk shape of a sharding codec is left out (the
    line says ``chunks``)."""
    if not isinstance(codec, dict):
        return _scalar(codec)
    if isinstance(codec.get("name"), str):
        name = codec["name"]
        config = codec.get("configuration")
        config = dict(config) if isinstance(config, dict) else {}
        if name == "sharding_indexed":
            config.pop("chunk_shape", None)
    else:
        name = str(codec.get("id"))
        config = {k: v for k, v in codec.items() if k != "id"}
    if not config:
        return name
    return name + "(" + ", ".join(f"{k}={_scalar(v)}" for k, v in config.items()) + ")"


def codecs_text(meta: ArrayMeta) -> str:
    """The array's codecs in the order they encode: v2's filters then compressor, or
    v3's codec list."""
    codecs: list[Any] = []
    for _, value in codec_fields(meta):
        if isinstance(value, list):
            codecs += value
        elif value is not None:
            codecs.append(value)
    return clip("[" + ", ".join(codec_text(c) for c in codecs) + "]", MAX_CODECS_TEXT)


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def node_text(node: Node) -> str:
    name = node.name or "/"
    if node.meta is None:
        return f"{name} (metadata unreadable)"
    if not isinstance(node.meta, ArrayMeta):
        return name
    meta = node.meta
    parts = [name, _shape(meta.shape), type_text(written_type(meta))]
    if meta.shards is not None:
        parts.append(f"shards={_shape(meta.shards.shard_shape)}")
    parts += [f"chunks={_shape(meta.chunks)}", f"codecs={codecs_text(meta)}"]
    return " ".join(parts)


def tree_lines(root: Node) -> list[str]:
    """The drawing, one line per node (with a stack: a hierarchy may be deeper than
    Python's recursion limit)."""
    lines = [node_text(root)]
    stack = [(child, "", i == len(root.children) - 1) for i, child in enumerate(root.children)]
    stack.reverse()
    while stack:
        node, prefix, last = stack.pop()
        lines.append(prefix + ("└── " if last else "├── ") + node_text(node))
        inner = prefix + ("    " if last else "│   ")
        count = len(node.children)
        stack.extend(
            (child, inner, i == count - 1) for i, child in reversed(list(enumerate(node.children)))
        )
    return lines


@click.command("tree")
@click.argument("store")
@click.option(
    "--no-consolidated",
    is_flag=True,
    help="List the store itself, ignoring consolidated metadata.",
)
@click.option("--anonymous", is_flag=True, help="S3: unsigned requests (public buckets).")
def tree_command(store: str, no_consolidated: bool, anonymous: bool) -> None:
    """Print the hierarchy of the Zarr STORE: groups, and arrays with their shape,
    data type, chunks and codecs. Exits 1 if any metadata cannot be read."""
    opened, hierarchy = open_and_walk(store, anonymous=anonymous, consolidated=not no_consolidated)
    if not hierarchy.listed:
        echo(
            f"zarrfs: {opened.describe()} cannot be listed and holds no consolidated "
            "metadata: only its root is shown",
            err=True,
        )
    for line in tree_lines(hierarchy.root):
        echo(line)
    found = hierarchy.problem_lines()
    for problem in found:
        echo(f"zarrfs: metadata unreadable: {problem}", err=True)
    sys.exit(1 if found else 0)
