"""[notify] webhook: the outcome of each recovery POSTed as JSON to a real HTTP server on loopback."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer

from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.notify import WebhookNotifier


def test_outcomes_are_posted_and_steps_are_not() -> None:
    received: list[dict[str, object]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204 if len(received) < 3 else 500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        notifier = WebhookNotifier(f"http://127.0.0.1:{server.server_port}/hook")
        at = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
        for kind, detail in [("preempted", ""), ("restarting", ""), ("resumed", "step 1200 (0 lost)"),
                             ("failed", "SSH refused \x1b]52;c;evil\x07"), ("gave_up", "20 restarts")]:  # fmt: skip
            notifier(RecoveryEvent("trainer-1", kind, at, detail))  # type: ignore[arg-type]
        notifier.close()
    finally:
        server.shutdown()
    assert [r["event"] for r in received] == ["resumed", "failed", "gave_up"]
    assert received[0]["text"] == "gcptui keep-alive: trainer-1 recovered: step 1200 (0 lost)"
    assert received[0]["at"] == "2026-11-27T03:00:00+00:00" and received[0]["machine"] == "trainer-1"
    assert received[1]["detail"] == "SSH refused"  # a VM's terminal sequences are not carried onward
    assert (notifier.sent, notifier.failed) == (2, 1)
