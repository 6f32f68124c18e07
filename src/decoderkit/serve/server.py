"""Run an app under uvicorn: loopback by default, and SIGTERM as a clean, draining stop.

uvicorn finishes the in-flight requests on SIGTERM (no new connections), runs the app's
shutdown, then raises the signal again with the handler that was there before it. That
handler is ours: the stop was asked for and done, so the process exits with status 0.
"""

from __future__ import annotations

import ipaddress
import signal

import uvicorn


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: assume it reaches the network
        return False


def serve(app, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` on host:port until SIGTERM or SIGINT; returns after draining."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                           timeout_graceful_shutdown=None))
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        raise OSError(f"could not serve on {host}:{port} (see the log above)")


def _stopped(signum, frame) -> None:
    """uvicorn's re-raised SIGTERM after its graceful shutdown: nothing left to do."""
