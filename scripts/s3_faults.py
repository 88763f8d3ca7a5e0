"""Faults that scripts/s3_server.py injects when started with ``--faults`` (tests only).

A test sets them at run time with ``POST /_faults`` and a JSON object, and reads the
counters with ``GET /_faults``; each fault applies to requests whose key contains
its ``match`` (default: every key), ``count`` times (-1: until cleared):

- ``put_error``: {"status": 503, "code": "SlowDown"}: PUTs answered with that error,
  nothing stored;
- ``hold_put``: PUTs received whole, then neither answered nor applied until
  ``{"release": true}``; their preconditions are checked when they are applied, as
  S3 checks them when it commits (a late request), and the outcomes are counted;
- ``get_stall``: GETs not answered until released (or the server stopped);
- ``get_trickle``: {"rate": bytes per second}: GET bodies sent that slowly;
- ``get_truncate``: {"after": n}: GET bodies cut after n bytes (the connection
  closed, Content-Length promising more);
- ``get_corrupt``: GET bodies with one byte flipped in the middle (a corrupting
  proxy: status and length as they should be);
- ``echo_error``: any request answered 400 with a body quoting its headers,
  Authorization included (as some servers' error pages do);
- ``{"release": true}`` applies held PUTs and answers stalled GETs;
``{"drop": [kinds]}`` removes faults (what they hold stays held);
``{"clear": true}`` removes every fault (and releases).

One process serves them all (``--faults`` implies ``--workers 1``): the faults
live in its memory, shared by its connection threads.
"""

from __future__ import annotations

import json
import threading
from typing import Any

KINDS = (
    "put_error",
    "hold_put",
    "get_stall",
    "get_trickle",
    "get_truncate",
    "get_corrupt",
    "echo_error",
)


class Faults:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, dict[str, Any]] = {}
        self.release_event = threading.Event()
        self.counters: dict[str, Any] = {
            "puts": 0,
            "gets": 0,
            "deletes": 0,
            "held": 0,
            "stalled": 0,
            "late_outcomes": [],  # statuses of held PUTs when applied
        }

    def control(self, body: bytes) -> bytes:
        """A POST /_faults: the faults set as asked; the counters as JSON."""
        try:
            asked = json.loads(body or b"{}")
        except ValueError:
            asked = {}
        with self.lock:
            if asked.get("clear"):
                self.active.clear()
            for kind in asked.get("drop", ()):
                self.active.pop(kind, None)
            for kind in KINDS:
                if isinstance(asked.get(kind), dict):
                    self.active[kind] = {"count": -1, "match": "", **asked[kind]}
            if asked.get("release") or asked.get("clear"):
                event, self.release_event = self.release_event, threading.Event()
                event.set()
        return self.report()

    def report(self) -> bytes:
        with self.lock:
            return json.dumps(self.counters).encode()

    def take(self, kind: str, key: str) -> dict[str, Any] | None:
        """The fault ``kind`` if it applies to this request on ``key`` (counted down)."""
        with self.lock:
            fault = self.active.get(kind)
            if fault is None or str(fault.get("match", "")) not in key:
                return None
            if fault["count"] > 0:
                fault["count"] -= 1
                if fault["count"] == 0:
                    del self.active[kind]
            return dict(fault)

    def count(self, name: str, value: Any = 1) -> None:
        with self.lock:
            if isinstance(self.counters[name], list):
                self.counters[name].append(value)
            else:
                self.counters[name] += value

    def wait_release(self, timeout: float = 600.0) -> None:
        with self.lock:
            event = self.release_event
        event.wait(timeout)
