"""Which directories listed from consolidated metadata keep what they are.

Listed from consolidated metadata, a node's ``Loaded`` is made again from the
document whenever asked, so only the most recently used ones are kept
(``MAX_LOADED_NODES``, ``MAX_LOADED_BYTES`` of documents); the others keep what
names them alone (namespace/nodes.py). An array's state is never made twice:
while anything holds the state of a node dropped here (an open file, unflushed
chunks, another array's header using it as a coordinate), loading the node again
finds it (``held``).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from zarrfs.core.arrays import ArrayState
from zarrfs.namespace.nodes import DirNode, Loaded

# The nodes listed from consolidated metadata whose parsed metadata, documents and
# files are kept at once (docs/semantics.md, "Limits and hostile input"): a group of
# 10 000 arrays fits, so that each pass of ls -R, find, stat loads each array once.
MAX_LOADED_NODES = 12_288
MAX_LOADED_BYTES = 8 << 20  # of their documents as shown


class RecentNodes:
    """The recently used nodes, oldest first, and the weight of their documents;
    one that was used since it came to the front gets a second turn (the clock
    algorithm: a use costs a flag, not a reordering)."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock  # the tree's: loading a node and listing one hold it
        self._recent: OrderedDict[DirNode, None] = OrderedDict()
        self._bytes = 0
        # The array states of those dropped, while anything holds them.
        self._states: weakref.WeakValueDictionary[DirNode, ArrayState] = (
            weakref.WeakValueDictionary()
        )

    def remember(self, node: DirNode, loaded: Loaded) -> None:
        """``node`` is ``loaded``, until dropped for more recently used ones."""
        recent = self._recent
        with self._lock:
            node.loaded = loaded
            recent[node] = None
            self._bytes += loaded.weight
            while len(recent) > 1 and (
                len(recent) > MAX_LOADED_NODES or self._bytes > MAX_LOADED_BYTES
            ):
                oldest, _ = recent.popitem(last=False)
                dropped = oldest.loaded
                assert dropped is not None
                if dropped.used or oldest is node:  # the one just loaded stays
                    dropped.used = False
                    recent[oldest] = None
                    continue
                oldest.loaded = None
                self._bytes -= dropped.weight
                state = dropped.made_state
                if state is not None:
                    self._states[oldest] = state  # found again while in use

    def held(self, node: DirNode) -> Loaded | None:
        """What a dropped node is, where something still holds its array state."""
        state = self._states.get(node)
        if state is None:
            return None
        return Loaded(state.meta, state.documents, state)

    def replace(self, node: DirNode, loaded: Loaded) -> None:
        """``node`` is now ``loaded`` (its documents changed in the store): what it
        was is forgotten, its state included, whatever still holds that."""
        with self._lock:
            self._states.pop(node, None)
            old = node.loaded
            if node in self._recent and old is not None:
                self._bytes += loaded.weight - old.weight
                node.loaded = loaded
            else:
                self.remember(node, loaded)

    def keep(self, node: DirNode, loaded: Loaded) -> None:
        """``node`` keeps ``loaded`` (what it is now) for good."""
        with self._lock:
            if node in self._recent:
                del self._recent[node]
                self._bytes -= loaded.weight
