"""bisectbot.bot.webhook over real HTTP: signatures, de-duplication (in the real state
database), event filtering; and what a hostile or broken client can hold of it (deadlines,
limits, logging), checked over raw sockets by counting, never by timing."""

from __future__ import annotations

import json
import logging
import resource
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from bisectbot.bot.memory import BotMemory
from bisectbot.bot.webhook import CommentEvent, ServeLimits, make_webhook_server, sign, verify_signature
from bisectbot.github.commands import BisectCommand, parse_comment
from bisectbot.state.storage import Store

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
    def __init__(self, db: Path, limits: ServeLimits | None = None) -> None:
        self.calls: list[CommentEvent] = []
        self.seen = Store(db)
        self.fail_next = False
        self.server = make_webhook_server("127.0.0.1", 0, SECRET, self.on_command, BotMemory(self.seen), limits=limits)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        host, port = self.server.server_address[:2]
        self.address = (host, port)
        self.url = f"http://{host}:{port}/webhook"

    def on_command(self, event: CommentEvent) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("queue full")
        self.calls.append(event)

    def post(
        self,
        payload: Any,
        *,
        event: str = "issue_comment",
        delivery: str | None = None,
        secret: bytes = SECRET,
        signature: str | None = None,
    ) -> requests.Response:
        body = json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": signature if signature is not None else sign(secret, body),
            "User-Agent": "GitHub-Hookshot/abc123",
        }
        return requests.post(self.url, data=body, headers=headers, timeout=5)


def running_hook(tmp_path: Path, limits: ServeLimits | None = None) -> Iterator[Hook]:
    h = Hook(tmp_path / "state.sqlite3", limits)
    try:
        yield h
    finally:
        h.server.shutdown()
        h.server.server_close()
        h.seen.close()


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Hook]:
    yield from running_hook(tmp_path)


@pytest.fixture
def quick_hook(tmp_path: Path) -> Iterator[Hook]:
    """Deadlines short enough to pass while a test waits for the server to act on them."""
    yield from running_hook(tmp_path, ServeLimits(head_timeout=0.3, body_timeout=0.3, keep_alive=1))


def comment_event(
    body: str = "/bisect good=b1 bad=b2", association: str = "MEMBER", action: str = "created", user_type: str = "User"
) -> dict[str, Any]:
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
    c = hook.calls[0]
    assert parse_comment(c.body, c.association) == BisectCommand("b1", "b2")
    assert (c.comment_id, c.issue, c.login, c.user_type, c.repo) == (42, 1, "maintainer", "User", "ggml-org/llama.cpp")


def test_forged_signature_is_refused(hook: Hook) -> None:
    assert hook.post(comment_event(), secret=b"guess").status_code == 401
    assert hook.post(comment_event(), signature="").status_code == 401
    assert hook.post(comment_event(), signature="sha256=" + "0" * 64).status_code == 401
    assert hook.calls == []


def test_tampered_body_is_refused(hook: Hook) -> None:
    body = json.dumps(comment_event("/check")).encode()
    good_sig = sign(SECRET, body)
    tampered = body.replace(b"/check", b"/cancel")
    r = requests.post(
        hook.url,
        data=tampered,
        headers={"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "d1", "X-Hub-Signature-256": good_sig},
        timeout=5,
    )
    assert r.status_code == 401 and hook.calls == []


def test_replayed_delivery_is_ignored(hook: Hook) -> None:
    assert hook.post(comment_event(), delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958").status_code == 202
    r = hook.post(comment_event(), delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert r.status_code == 200 and "duplicate" in r.json()["message"]
    assert len(hook.calls) == 1


def test_concurrent_redeliveries_run_once(hook: Hook) -> None:
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(hook.post(comment_event(), delivery="same").status_code))
        for _ in range(8)
    ]
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
    r = requests.post(
        hook.url,
        data=body,
        headers={
            "X-GitHub-Event": "issue_comment",
            "X-GitHub-Delivery": "m1",
            "X-Hub-Signature-256": sign(SECRET, body),
        },
        timeout=5,
    )
    assert r.status_code == 400
    body = json.dumps(comment_event()).encode()
    r = requests.post(
        hook.url,
        data=body,
        headers={"X-GitHub-Event": "issue_comment", "X-Hub-Signature-256": sign(SECRET, body)},
        timeout=5,
    )
    assert r.status_code == 400  # no delivery id: cannot de-duplicate
    assert requests.get(hook.url.replace("/webhook", "/healthz"), timeout=5).status_code == 200
    assert hook.calls == []


def test_delivery_ids_outlive_the_server(hook: Hook, tmp_path: Path) -> None:
    assert hook.post(comment_event(), delivery="d-9").status_code == 202
    again = Store(tmp_path / "state.sqlite3")  # another process, later
    try:
        seen = BotMemory(again)
        assert not seen.add_delivery_if_new("d-9") and seen.add_delivery_if_new("d-10")
    finally:
        again.close()


def test_server_requires_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make_webhook_server("127.0.0.1", 0, b"", lambda p: None, BotMemory(Store(tmp_path / "s.sqlite3")))


def test_shutdown_before_serving_returns(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    server = make_webhook_server("127.0.0.1", 0, SECRET, lambda p: None, store)
    assert server.server_address[1] > 0  # bound at construction
    server.shutdown()
    server.server_close()
    server.serve_forever()  # after shutdown: returns at once
    store.close()


# -- hostile and broken clients, over raw sockets ----------------------------------------------------
def head(method: str = "POST", path: str = "/webhook", **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost"] + [
        f"{k.replace('_', '-')}: {v}" for k, v in headers.items()
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def connect(hook: Hook) -> socket.socket:
    return socket.create_connection(hook.address, timeout=30)  # the timeout only ends a broken test


def read_to_eof(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def until(condition: Any, what: str) -> None:
    """Wait for the server to reach a state (a count), failing after a generous bound."""
    for _ in range(3000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def read_response(s: socket.socket) -> bytes:
    """One response of a keep-alive connection (head and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    length = int(data.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(data.split(b"\r\n\r\n", 1)[1]) < length:
        data += s.recv(65536)
    return data


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_a_lying_content_length_is_answered_408_and_closed(quick_hook: Hook) -> None:
    with connect(quick_hook) as s:
        s.sendall(
            head(
                Content_Length="1000",
                X_Hub_Signature_256=sign(SECRET, b"x" * 1000),
                X_GitHub_Event="issue_comment",
                X_GitHub_Delivery="lie",
            )
            + b"x" * 10
        )
        response = read_to_eof(s)
    assert status_of(response) == 408 and b"timed out" in response
    assert quick_hook.server.stats.body_timeouts == 1 and quick_hook.calls == []


def test_half_a_request_head_is_closed(quick_hook: Hook) -> None:
    with connect(quick_hook) as s:
        s.sendall(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Le")
        assert read_to_eof(s) == b""
    with connect(quick_hook) as s:  # nothing at all
        assert read_to_eof(s) == b""
    with connect(quick_hook) as s:  # half of the second request of a keep-alive connection
        s.sendall(head("GET", "/healthz"))
        first = read_response(s)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        assert status_of(first) == 200 and read_to_eof(s) == b""
    assert quick_hook.server.stats.head_timeouts == 3
    assert requests.get(quick_hook.url.replace("/webhook", "/healthz"), timeout=5).status_code == 200


def test_an_oversized_body_is_refused_before_it_is_read(hook: Hook) -> None:
    for signature in ("sha256=" + "0" * 64, ""):
        with connect(hook) as s:
            s.sendall(
                head(
                    Content_Length=str(24 * 1024 * 1024),
                    X_Hub_Signature_256=signature,
                    X_GitHub_Event="issue_comment",
                    X_GitHub_Delivery="big",
                )
            )
            response = read_to_eof(s)  # the 24 MB were never sent
        assert status_of(response) == 413
    assert hook.server.stats.body_bytes == 0


def test_an_unsigned_body_is_not_read(hook: Hook) -> None:
    with connect(hook) as s:
        s.sendall(head(Content_Length="100000", X_GitHub_Event="issue_comment", X_GitHub_Delivery="u"))
        response = read_to_eof(s)
    assert status_of(response) == 401 and hook.server.stats.body_bytes == 0


def test_a_body_without_content_length_gets_411(hook: Hook) -> None:
    with connect(hook) as s:
        s.sendall(head(Transfer_Encoding="chunked", X_Hub_Signature_256=sign(SECRET, b"{}")) + b"2\r\n{}\r\n0\r\n\r\n")
        assert status_of(read_to_eof(s)) == 411


def test_the_signature_is_checked_before_the_body_is_parsed(hook: Hook) -> None:
    headers = {"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "p1"}
    assert requests.post(hook.url, data=b"not json", headers=headers, timeout=5).status_code == 401
    r = requests.post(
        hook.url, data=b"not json", headers={**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}, timeout=5
    )
    assert r.status_code == 401 and hook.calls == []


@pytest.mark.parametrize("opening, closing", [(b"[", b"]"), (b'{"a":', b"}")])
def test_deeply_nested_json_is_a_400(hook: Hook, opening: bytes, closing: bytes) -> None:
    body = opening * 100_000 + b"1" + closing * 100_000
    r = requests.post(
        hook.url,
        data=body,
        timeout=30,
        headers={
            "X-GitHub-Event": "issue_comment",
            "X-GitHub-Delivery": "deep",
            "X-Hub-Signature-256": sign(SECRET, body),
        },
    )
    assert r.status_code == 400 and r.json()["message"] == "body is not JSON"
    assert hook.post(comment_event()).status_code == 202  # and the server goes on


def test_posts_beyond_the_limit_get_503_while_healthz_answers(tmp_path: Path) -> None:
    for h in running_hook(tmp_path, ServeLimits(max_posts=2, body_timeout=60)):
        slow = [connect(h) for _ in range(2)]
        for s in slow:  # signed heads, one byte of a hundred: both wait for their bodies
            s.sendall(
                head(
                    Content_Length="100",
                    X_Hub_Signature_256=sign(SECRET, b"x" * 100),
                    X_GitHub_Event="issue_comment",
                    X_GitHub_Delivery="slow",
                )
                + b"x"
            )
        until(lambda: h.server.app.posts == 2, "two POSTs in progress")
        r = h.post(comment_event())
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert requests.get(h.url.replace("/webhook", "/healthz"), timeout=5).status_code == 200
        for s in slow:
            s.close()
        until(lambda: h.server.app.posts == 0, "the hung-up POSTs let go")
        assert h.post(comment_event()).status_code == 202
        assert h.server.stats.busy == 1 and len(h.calls) == 1


def _quiet(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert loud == [], [r.getMessage() for r in loud]
    assert "Traceback" not in capfd.readouterr().err


def test_broken_clients_are_debug_lines_not_tracebacks(
    hook: Hook, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    with connect(hook) as s:  # not HTTP
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n")
        assert status_of(read_to_eof(s)) == 400
    with connect(hook) as s:  # a websocket upgrade
        s.sendall(head("GET", "/healthz", Connection="Upgrade", Upgrade="websocket"))
        assert status_of(read_response(s)) == 200
    with connect(hook) as s:  # a head past h11's limit, still unfinished
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Big: " + b"y" * 100_000)
        assert status_of(read_to_eof(s)) == 400
    for _ in range(20):  # hang up with a reset in the middle of a body
        s = connect(hook)
        s.sendall(head(Content_Length="1000", X_Hub_Signature_256=sign(SECRET, b"x" * 1000)) + b"x" * 500)
        # reset only once the server has the request under way: a reset it has not yet accepted
        # would be counted as gone, then take a POST slot after the check below (a busy machine)
        until(lambda: hook.server.app.posts >= 1, "the request under way")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    until(lambda: hook.server.app.posts == 0 and hook.server.connections == 0, "the resets noticed")
    assert hook.post(comment_event()).status_code == 202
    assert any(r.name == "bisectbot.bot.webhook" and "Invalid HTTP request" in r.getMessage() for r in caplog.records)
    _quiet(caplog, capfd)


SLOW = 3000


def _enough_descriptors() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * SLOW + 1000:
        pytest.skip(f"the open-file hard limit is {hard}: {SLOW} connections need both ends in this process")
    if soft != resource.RLIM_INFINITY and soft < 2 * SLOW + 1000:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@pytest.mark.slow
def test_slow_connections_never_starve_healthz(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    _enough_descriptors()
    caplog.set_level(logging.INFO)
    for h in running_hook(tmp_path, ServeLimits(head_timeout=600)):  # held open for the whole test
        healthz = h.url.replace("/webhook", "/healthz")
        slow = []
        try:
            for i in range(SLOW):
                s = connect(h)
                slow.append(s)
                s.sendall(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1")
                if i % 100 == 0:
                    assert requests.get(healthz, timeout=10).status_code == 200
            until(lambda: h.server.connections == SLOW, f"{SLOW} connections held")
            during = [requests.get(healthz, timeout=10).status_code for _ in range(50)]
        finally:
            for s in slow:
                s.close()
        after = [requests.get(healthz, timeout=10).status_code for _ in range(50)]
        until(lambda: h.server.connections == 0, "all closed")
        assert during == [200] * 50 and after == [200] * 50
        assert h.post(comment_event()).status_code == 202
    _quiet(caplog, capfd)


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda p: p["comment"].update(id="42"), "comment.id is str, not a number"),
        (lambda p: p["comment"].update(id=True), "comment.id is bool, not a number"),
        (lambda p: p["comment"].update(id=-1), "comment.id is -1, not a positive number"),
        (lambda p: p["comment"].pop("id"), "comment.id is missing"),
        (lambda p: p["issue"].update(number="1"), "issue.number is str, not a number"),
        (lambda p: p.update(issue=[1]), "issue is list, not an object"),
        (lambda p: p["comment"].update(body=["/bisect"]), "comment.body is list, not a string"),
        (lambda p: p["comment"].update(user="maintainer"), "comment.user is str, not an object"),
        (lambda p: p["comment"]["user"].update(login=7), "comment.user.login is int, not a string"),
        (lambda p: p.update(repository={"full_name": 3}), "repository.full_name is int, not a string"),
    ],
)
def test_a_payload_of_the_wrong_shape_is_a_400_not_a_traceback(
    hook: Hook, change: Any, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """GitHub's types are fixed; a sender that gets them wrong learns which field, and the bot's
    handler never sees the event (it used to answer 500 with a traceback for a string id)."""
    payload = comment_event()
    change(payload)
    r = hook.post(payload)
    assert (r.status_code, r.json()) == (400, {"message": f"not an issue_comment payload: {said}"})
    assert hook.calls == [] and "Traceback" not in caplog.text
    # nulls where GitHub may send them are fine
    payload = comment_event()
    payload["comment"].update(body=None, author_association=None)
    payload["repository"] = None
    assert hook.post(payload).status_code == 202 and len(hook.calls) == 1
    assert (hook.calls[0].body, hook.calls[0].association, hook.calls[0].repo) == ("", "", "")
