"""The one HTTP client for servers bisectbot starts itself on 127.0.0.1 (llama-server, arms).

Why not `requests`: these are loopback calls to a child we own, with a timeout each; the
standard library is enough, and keeping them in one place keeps their error handling the same:
an HTTP error status is an answer (returned), a refused or dropped connection is `HttpFailure`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


class HttpFailure(Exception):
    """No answer: connection refused or dropped, or a timeout (`timed_out`)."""

    def __init__(self, message: str, *, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)


def request(url: str, payload: Any = None, *, timeout: float) -> Reply:
    """GET `url`, or POST `payload` as JSON when given; any status comes back as a `Reply`."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Reply(resp.status, resp.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read())
    except TimeoutError:
        raise HttpFailure(f"no answer from {url} after {timeout:g} s", timed_out=True) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise HttpFailure(f"no answer from {url} after {timeout:g} s", timed_out=True) from None
        raise HttpFailure(f"{url}: {reason}") from None
