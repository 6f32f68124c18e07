"""Run an app under uvicorn: loopback by default, and SIGTERM as a clean, draining stop.

``bind`` takes the address first (a port in use is one line naming it, before the model is
loaded) and uvicorn serves that very socket, so no other process can take the port between
the check and the start. uvicorn finishes the in-flight requests on SIGTERM (no new
connections), runs the app's shutdown, then raises the signal again with the handler that was
there before it. That handler is ours: the stop was asked for and done, so the process exits
with status 0.
"""

from __future__ import annotations

import errno
import ipaddress
import signal
import socket

import uvicorn

from decoderkit.base.errors import UsageError

BACKLOG = 2048  # uvicorn's default


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: assume it reaches the network
        return False


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port for ``serve``; a UsageError naming the flag when the
    address is taken, not this machine's, or not allowed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn picks it
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not a listening port's
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)  # the port is ours from here; connections wait for the start
    except OSError as err:
        sock.close()
        raise UsageError(_bind_error(host, port, err)) from None
    sock.set_inheritable(True)
    return sock


def _bind_error(host: str, port: int, err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return (f"--port {port}: {host}:{port} is already in use (another server?); "
                f"choose another --port or stop that process")
    if err.errno == errno.EACCES:
        return f"--port {port}: not allowed to bind {host}:{port} (ports below 1024 need root)"
    if err.errno == errno.EADDRNOTAVAIL:
        return f"--host {host}: not an address of this machine"
    return f"--host {host} --port {port}: cannot bind ({err.strerror or err})"


def serve(app, sock: socket.socket, log_level: str = "info") -> None:
    """Serve ``app`` on ``sock`` (from ``bind``) until SIGTERM or SIGINT; returns after
    draining."""
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                           timeout_graceful_shutdown=None))
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    if not server.started:
        raise UsageError(f"could not serve on {host}:{port} (see the log above)")


def _stopped(signum, frame) -> None:
    """uvicorn's re-raised SIGTERM after its graceful shutdown: nothing left to do."""
