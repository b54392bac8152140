"""The socket watchdog: an overall deadline for one HTTP attempt, which requests cannot give.

Why it exists: requests and urllib3 bound each socket read, not the whole answer, so a server
that trickles a byte a second keeps a call alive for hours. A :class:`Watchdog` mounted on a
session sees every connection its requests use; an attempt run under :meth:`Watchdog.deadline`
that has not finished in time (connect + the whole response) has its socket cut, and fails with
:class:`DeadlinePassed`, which the client retries like a timeout and reports as such.
"""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import github3.exceptions as gh_exc
import requests
import urllib3.connection
import urllib3.connectionpool


class DeadlinePassed(Exception):
    """An attempt's watchdog cut its connection (retried like a timeout, reported as such)."""


class _Sockets:
    """Which HTTP connection each thread is using right now, so a watchdog can cut it.

    urllib3 opens and reuses connections deep inside requests; the only hook that sees every
    request on the thread that makes it is the connection class. A cut shuts the socket down,
    which wakes the blocked read with an error: the attempt fails as if it had timed out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_thread: dict[int, urllib3.connection.HTTPConnection] = {}
        self._cut: set[int] = set()

    def using(self, conn: urllib3.connection.HTTPConnection) -> None:
        with self._lock:
            self._by_thread[threading.get_ident()] = conn

    def cut(self, thread: int) -> None:
        """Watchdog thread: end the attempt running on `thread`."""
        with self._lock:
            self._cut.add(thread)
            conn = self._by_thread.get(thread)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def was_cut(self) -> bool:
        with self._lock:
            return threading.get_ident() in self._cut

    def done(self) -> None:
        with self._lock:
            self._by_thread.pop(threading.get_ident(), None)
            self._cut.discard(threading.get_ident())


def _watched_adapter(sockets: _Sockets) -> requests.adapters.HTTPAdapter:
    """An HTTPAdapter whose connections report themselves to `sockets` on every request."""

    def tracked(base: type[urllib3.connection.HTTPConnection]) -> type[urllib3.connection.HTTPConnection]:
        class Tracked(base):  # type: ignore[valid-type, misc]
            def request(self, *args: Any, **kwargs: Any) -> None:
                sockets.using(self)
                super().request(*args, **kwargs)

        return Tracked

    class Pool(urllib3.connectionpool.HTTPConnectionPool):
        ConnectionCls = tracked(urllib3.connection.HTTPConnection)

    class TlsPool(urllib3.connectionpool.HTTPSConnectionPool):
        ConnectionCls = tracked(urllib3.connection.HTTPSConnection)  # type: ignore[assignment]

    class Adapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": TlsPool}

    return Adapter()


class Watchdog:
    """Cuts the connection of an attempt that outlives its deadline (one per session)."""

    def __init__(self) -> None:
        self._sockets = _Sockets()

    def mount(self, session: requests.Session) -> None:
        """Route every request of `session` through connections the watchdog can cut."""
        for prefix in ("http://", "https://"):
            session.mount(prefix, _watched_adapter(self._sockets))

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Run one attempt on this thread; if it is still running after `seconds`, its socket is
        cut and the failure it ends with becomes :class:`DeadlinePassed`."""
        watchdog = threading.Timer(seconds, self._sockets.cut, (threading.get_ident(),))
        watchdog.daemon = True
        watchdog.start()
        try:
            yield
        except (gh_exc.GitHubException, requests.RequestException):
            if self._sockets.was_cut():
                raise DeadlinePassed() from None
            raise
        finally:
            watchdog.cancel()
            self._sockets.done()
