"""A VM's error line in a webhook's ``text`` is text, not chat markup (Slack reads ``<!channel>`` as a
mention and ``<https://evil|click>`` as a link), and is bounded; a real HTTP server on loopback."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer

from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.notify import MAX_TEXT, WebhookNotifier

HOSTILE = "<!channel> job died: see <https://evil.example/x|the logs> & <@U123> " + "A" * 5000


def test_vm_text_in_the_webhook_is_escaped_and_bounded() -> None:
    received: list[dict[str, str]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        notifier = WebhookNotifier(f"http://127.0.0.1:{server.server_port}/hook")
        at = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)
        notifier(RecoveryEvent("vm<@here>" + "n" * 3000, "failed", at, HOSTILE))
        notifier.close()
    finally:
        server.shutdown()
    [body] = received
    text = body["text"]
    assert "<" not in text and ">" not in text, text[:200]
    assert (
        "&lt;!channel&gt;" in text and "&lt;https://evil.example/x|the logs&gt; &amp; &lt;@U123&gt;" in text
    )
    assert "vm&lt;@here&gt;" in text
    assert len(text) <= MAX_TEXT and len(body["detail"]) <= 500 and len(body["machine"]) <= 200
