"""Receive GitHub ``issue_comment`` webhooks: verify, de-duplicate, hand over.

Why each step:

* **Signature first** (``X-Hub-Signature-256``, HMAC-SHA256 over the raw body, compared
  with :func:`hmac.compare_digest`): anything unsigned or forged gets 401 before its JSON
  is even parsed.
* **De-duplication by ``X-GitHub-Delivery``**: GitHub redelivers on timeouts and people
  press "Redeliver"; a command must not start two bisects. The state database
  (`storage.Store`) remembers the ids; the server only needs the two calls of `DeliveryStore`.
* **Answer fast**: ``on_command`` should enqueue and return (GitHub waits 10 s at most).
  202 = handed over, 200 = understood and ignored (ping, other events, edits, bots).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Protocol, runtime_checkable

log = logging.getLogger(__name__)

MAX_BODY = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
SIGNATURE_PREFIX = "sha256="


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub would send for ``body``."""
    return SIGNATURE_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True only if ``header`` is GitHub's HMAC-SHA256 of ``body`` under ``secret``.

    An empty secret never verifies: a misconfigured server must refuse, not accept all.
    """
    if not secret or not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    expected = sign(secret, body)
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("ascii", "replace"))


@runtime_checkable
class DeliveryStore(Protocol):
    """Remembers webhook delivery ids so each delivery is handled once."""

    def add_delivery_if_new(self, delivery_id: str) -> bool:
        """Record ``delivery_id``; True if it was not seen before (atomic check-and-set)."""
        ...

    def forget_delivery(self, delivery_id: str) -> None:
        """Drop a delivery id (its handling failed, so a redelivery should be handled)."""
        ...


def make_webhook_server(
    host: str,
    port: int,
    secret: bytes,
    on_command: Callable[[dict[str, Any]], None],
    seen: DeliveryStore,
) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) that passes new ``issue_comment`` payloads on.

    Call ``serve_forever()`` (e.g. in a thread) and ``shutdown()``/``server_close()``.
    ``port=0`` picks a free port: read it back from ``server.server_address``.
    Responses: 401 bad signature; 400 malformed; 202 handed to ``on_command``; 200 ignored
    (ping, other events, actions other than ``created``, comments by bots, redeliveries);
    500 if ``on_command`` raised (the delivery id is forgotten so a redelivery is retried).
    """
    if not secret:
        raise ValueError("a webhook secret is required")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "bisectbot"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook %s - " + format, self.address_string(), *args)

        def _reply(self, status: int, message: str) -> None:
            data = json.dumps({"message": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/healthz", ""):
                return self._reply(200, "ok")
            self._reply(404, "not found")

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self.close_connection = True
                return self._reply(411, "Content-Length required")
            if length < 0 or length > MAX_BODY:
                self.close_connection = True
                return self._reply(413, "payload too large")
            body = self.rfile.read(length)
            if not verify_signature(secret, body, self.headers.get("X-Hub-Signature-256")):
                log.warning("webhook: bad or missing signature from %s", self.address_string())
                return self._reply(401, "bad signature")
            event = self.headers.get("X-GitHub-Event", "")
            delivery = self.headers.get("X-GitHub-Delivery", "").strip()
            if event == "ping":
                return self._reply(200, "pong")
            if event != "issue_comment":
                return self._reply(200, f"ignored event {event or '(none)'}")
            if not delivery or len(delivery) > 200:
                return self._reply(400, "missing X-GitHub-Delivery")
            try:
                payload = json.loads(body)
            except ValueError:
                return self._reply(400, "body is not JSON")
            if not isinstance(payload, dict) or not isinstance(payload.get("comment"), dict):
                return self._reply(400, "not an issue_comment payload")
            if payload.get("action") != "created":
                return self._reply(200, f"ignored action {payload.get('action')}")
            user = payload["comment"].get("user") or {}
            if user.get("type") == "Bot":
                return self._reply(200, "ignored comment by a bot")
            if not seen.add_delivery_if_new(delivery):
                return self._reply(200, "duplicate delivery ignored")
            try:
                on_command(payload)
            except Exception:
                log.exception("webhook: handler failed for delivery %s", delivery)
                seen.forget_delivery(delivery)
                return self._reply(500, "handler failed")
            self._reply(202, "accepted")

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
