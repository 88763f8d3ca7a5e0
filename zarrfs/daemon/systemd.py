"""Telling systemd how the mount is doing (``Type=notify`` units), without libsystemd."""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify_systemd(message: str) -> None:
    """sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET, if set."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message.encode(), address)
    except OSError as e:
        log.warning("cannot notify systemd: %s", e)
