"""bisectbot.github.webhook over real HTTP: signatures, de-duplication (in the real state
database), event filtering."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from bisectbot.edges.storage import Store
from bisectbot.github.commands import BisectCommand, parse_comment
from bisectbot.github.webhook import make_webhook_server, sign, verify_signature

SECRET = b"It's a Secret to Everybody"


def test_verify_signature_matches_githubs_documented_example() -> None:
    # Example from GitHub's "Validating webhook deliveries" documentation.
    header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert verify_signature(SECRET, b"Hello, World!", header)
    assert not verify_signature(SECRET, b"Hello, World?", header)
    assert not verify_signature(b"other", b"Hello, World!", header)
    assert not verify_signature(SECRET, b"Hello, World!", header.replace("sha256=", "sha1="))
    assert not verify_signature(SECRET, b"Hello, World!", "")
    assert not verify_signature(SECRET, b"Hello, World!", None)
    assert not verify_signature(SECRET, b"Hello, World!", "sha256=ünïcode")
    assert not verify_signature(b"", b"x", sign(b"", b"x"))  # no secret, no trust


class Hook:
    def __init__(self, db: Path) -> None:
        self.calls: list[dict[str, Any]] = []
        self.seen = Store(db)
        self.fail_next = False
        self.server = make_webhook_server("127.0.0.1", 0, SECRET, self.on_command, self.seen)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}/webhook"

    def on_command(self, payload: dict[str, Any]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("queue full")
        self.calls.append(payload)

    def post(self, payload: Any, *, event: str = "issue_comment", delivery: str | None = None, secret: bytes = SECRET, signature: str | None = None) -> requests.Response:
        body = json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": signature if signature is not None else sign(secret, body),
            "User-Agent": "GitHub-Hookshot/abc123",
        }
        return requests.post(self.url, data=body, headers=headers, timeout=5)


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Hook]:
    h = Hook(tmp_path / "state.sqlite3")
    try:
        yield h
    finally:
        h.server.shutdown()
        h.server.server_close()
        h.seen.close()


def comment_event(body: str = "/bisect good=b1 bad=b2", association: str = "MEMBER", action: str = "created", user_type: str = "User") -> dict[str, Any]:
    return {
        "action": action,
        "issue": {"number": 1, "title": "Distribution changed"},
        "comment": {
            "id": 42,
            "body": body,
            "author_association": association,
            "user": {"login": "maintainer", "id": 7, "type": user_type},
        },
        "repository": {"full_name": "ggml-org/llama.cpp"},
        "sender": {"login": "maintainer", "type": user_type},
    }


def test_signed_comment_is_accepted_and_handed_over(hook: Hook) -> None:
    r = hook.post(comment_event())
    assert r.status_code == 202
    assert len(hook.calls) == 1
    c = hook.calls[0]["comment"]
    assert parse_comment(c["body"], c["author_association"]) == BisectCommand("b1", "b2")


def test_forged_signature_is_refused(hook: Hook) -> None:
    assert hook.post(comment_event(), secret=b"guess").status_code == 401
    assert hook.post(comment_event(), signature="").status_code == 401
    assert hook.post(comment_event(), signature="sha256=" + "0" * 64).status_code == 401
    assert hook.calls == []


def test_tampered_body_is_refused(hook: Hook) -> None:
    body = json.dumps(comment_event("/check")).encode()
    good_sig = sign(SECRET, body)
    tampered = body.replace(b"/check", b"/cancel")
    r = requests.post(hook.url, data=tampered, headers={"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "d1", "X-Hub-Signature-256": good_sig}, timeout=5)
    assert r.status_code == 401 and hook.calls == []


def test_replayed_delivery_is_ignored(hook: Hook) -> None:
    assert hook.post(comment_event(), delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958").status_code == 202
    r = hook.post(comment_event(), delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert r.status_code == 200 and "duplicate" in r.json()["message"]
    assert len(hook.calls) == 1


def test_concurrent_redeliveries_run_once(hook: Hook) -> None:
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(hook.post(comment_event(), delivery="same").status_code)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] * 7 + [202] and len(hook.calls) == 1


def test_failed_handler_allows_redelivery(hook: Hook) -> None:
    hook.fail_next = True
    assert hook.post(comment_event(), delivery="d-1").status_code == 500
    assert hook.post(comment_event(), delivery="d-1").status_code == 202
    assert len(hook.calls) == 1


@pytest.mark.parametrize(
    "payload, event",
    [
        (comment_event(action="edited"), "issue_comment"),
        (comment_event(action="deleted"), "issue_comment"),
        (comment_event(user_type="Bot"), "issue_comment"),
        ({"action": "opened", "issue": {}}, "issues"),
        ({"zen": "Keep it logically awesome.", "hook_id": 1}, "ping"),
    ],
)
def test_other_events_are_ignored_with_200(hook: Hook, payload: dict[str, Any], event: str) -> None:
    r = hook.post(payload, event=event)
    assert r.status_code == 200
    assert hook.calls == []


def test_malformed_requests(hook: Hook) -> None:
    body = b"not json"
    r = requests.post(hook.url, data=body, headers={"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "m1", "X-Hub-Signature-256": sign(SECRET, body)}, timeout=5)
    assert r.status_code == 400
    body = json.dumps(comment_event()).encode()
    r = requests.post(hook.url, data=body, headers={"X-GitHub-Event": "issue_comment", "X-Hub-Signature-256": sign(SECRET, body)}, timeout=5)
    assert r.status_code == 400  # no delivery id: cannot de-duplicate
    assert requests.get(hook.url.replace("/webhook", "/healthz"), timeout=5).status_code == 200
    assert hook.calls == []


def test_delivery_ids_outlive_the_server(hook: Hook, tmp_path: Path) -> None:
    assert hook.post(comment_event(), delivery="d-9").status_code == 202
    again = Store(tmp_path / "state.sqlite3")  # another process, later
    try:
        assert not again.add_delivery_if_new("d-9") and again.add_delivery_if_new("d-10")
    finally:
        again.close()


def test_server_requires_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make_webhook_server("127.0.0.1", 0, b"", lambda p: None, Store(tmp_path / "s.sqlite3"))
