"""Every module uses other objects' public attributes only: no ``other._name``
outside the object's own class (a module's own private names excepted)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "zarrfs"


def _reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    modules: set[str] = set()  # names bound by imports: a module's own names are its API
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.update(alias.asname or alias.name for alias in node.names)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in {"self", "cls", *modules}:
            continue
        if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
            continue
        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_objects_private_state() -> None:
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _reaches(path)]
    assert not found, "\n".join(found)
