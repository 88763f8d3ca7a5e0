"""Running one action for each of many items, keeping going past failures.

A flush of many units or arrays must try every one even when one fails (what is
stored is stored, what failed stays dirty), and report the first failure once all
have ended: ``each_at_once`` for work that waits on a network, ``each_in_turn``
where the work is serialised anyway.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import trio

from zarrfs.errors import ZarrfsError

T = TypeVar("T")


async def each_at_once(action: Callable[[T], Awaitable[object]], items: Iterable[T]) -> None:
    """``action(item)`` for every item, all started at once; a failure (a
    ZarrfsError) cuts no other short, and the first is raised once all ended."""
    errors: list[ZarrfsError] = []

    async def one(item: T) -> None:
        try:
            await action(item)
        except ZarrfsError as e:
            errors.append(e)

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item)
    if errors:
        raise errors[0]


async def each_in_turn(action: Callable[[T], Awaitable[object]], items: Iterable[T]) -> None:
    """``action(item)`` for every item, one after the other; as ``each_at_once``,
    the first failure is raised once every item was tried."""
    errors: list[ZarrfsError] = []
    for item in items:
        try:
            await action(item)
        except ZarrfsError as e:
            errors.append(e)
    if errors:
        raise errors[0]
