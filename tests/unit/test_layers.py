"""Layers one way: stores → formats → core → views → namespace → fuse → daemon → commands.

No module imports one of a layer above its own, lazily inside
a function included; ``errors`` and ``__init__``/``__main__`` stand outside. The
offline commands (``check``, ``tree``) import nothing above core, transitively.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGE = REPO / "zarrfs"

LAYERS = ["stores", "formats", "core", "views", "namespace", "fuse", "daemon", "commands"]
SHARED = {"errors", "__init__", "__main__"}
# Inside a layer, folders and modules that are layers of their own, lowest first.
SUBLAYERS = {
    "formats": [
        "limits", "grid", "codecs", "model", "conventions", "sidecars", "nrrd", "tiff", "netcdf",
        "metadata",
    ],
}


def layer_of(module: str) -> str | None:
    """``zarrfs.core.arrays`` → "core"; None for shared modules."""
    parts = module.split(".")
    if parts[0] != "zarrfs" or len(parts) < 2:
        return None
    name = parts[1]
    if name in SHARED:
        return None
    return name


def sublayer_of(module: str) -> str | None:
    """``zarrfs.formats.grid.layout`` → "grid"; None outside a layer with sublayers."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in SUBLAYERS:
        return None
    return parts[2]


def imports_of(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.startswith("zarrfs")]


def test_every_module_has_a_known_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(("zarrfs", *path.relative_to(PACKAGE).with_suffix("").parts))
        layer = layer_of(module)
        assert layer is None or layer in LAYERS, f"{module}: unknown layer {layer!r}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(("zarrfs", *path.relative_to(PACKAGE).with_suffix("").parts))
        own = layer_of(module)
        if own is None:
            continue
        for imported in imports_of(path):
            other = layer_of(imported)
            if other is not None and LAYERS.index(other) > LAYERS.index(own):
                wrong.append(f"{module} ({own}) imports {imported} ({other})")
    assert not wrong, "\n".join(wrong)


def test_sublayers_import_downwards() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(("zarrfs", *path.relative_to(PACKAGE).with_suffix("").parts))
        own = sublayer_of(module)
        if own is None or own == "__init__":
            continue
        order = SUBLAYERS[layer_of(module)]
        assert own in order, f"{module}: unknown sublayer {own!r}"
        for imported in imports_of(path):
            other = sublayer_of(imported)
            if layer_of(imported) != layer_of(module) or other is None:
                continue
            if order.index(other) > order.index(own):
                wrong.append(f"{module} ({own}) imports {imported} ({other})")
    assert not wrong, "\n".join(wrong)


# ``zarrfs check`` and ``zarrfs tree`` read a store without mounting it: they, and the
# command modules they are made of, stand on the lower layers alone.
OFFLINE_COMMANDS = ("zarrfs.commands.check", "zarrfs.commands.tree", "zarrfs.commands.walk")
OFFLINE_PARTS = {*OFFLINE_COMMANDS, "zarrfs.commands.output"}
OFFLINE_LAYERS = ("stores", "formats", "core", "errors")


def module_file(module: str) -> Path | None:
    """The file of a zarrfs module or package; None if there is none."""
    base = PACKAGE.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def modules_imported(path: Path) -> set[str]:
    """The zarrfs modules ``path`` imports, ``from package import module`` included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(
                f"{node.module}.{alias.name}"
                for alias in node.names
                if module_file(f"{node.module}.{alias.name}") is not None
            )
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "zarrfs"}


def imported_by(roots: tuple[str, ...]) -> dict[str, str]:
    """Every zarrfs module importing ``roots`` runs (their packages' ``__init__``
    included), each with the module that imports it."""
    seen = {root: "" for root in roots}
    todo = list(roots)
    while todo:
        module = todo.pop()
        parts = module.split(".")
        packages = {".".join(parts[:i]) for i in range(1, len(parts))}
        path = module_file(module)
        imported = packages | (modules_imported(path) if path is not None else set())
        for name in imported - seen.keys():
            seen[name] = module
            todo.append(name)
    return seen


def test_offline_commands_import_only_stores_formats_and_core() -> None:
    reached = imported_by(OFFLINE_COMMANDS)
    wrong = [
        f"{by} imports {module}"
        for module, by in sorted(reached.items())
        if layer_of(module) not in (None, *OFFLINE_LAYERS)
        and module not in OFFLINE_PARTS | {"zarrfs.commands"}
    ]
    assert not wrong, "\n".join(wrong)
    assert "zarrfs.stores.base" in reached and "zarrfs.core.read.loading" in reached


def test_the_check_sees_a_violation() -> None:
    assert layer_of("zarrfs.core.arrays") == "core"
    assert layer_of("zarrfs.commands.cli") == "commands"
    assert layer_of("zarrfs.errors") is None
    assert LAYERS.index(layer_of("zarrfs.views.raw")) > LAYERS.index("core")
    order = SUBLAYERS["formats"]
    assert order.index(sublayer_of("zarrfs.formats.metadata.v2")) > order.index("grid")
    reached = imported_by(("zarrfs.commands.mount",))
    assert "zarrfs.daemon.build" in reached and "zarrfs.namespace.tree" in reached
