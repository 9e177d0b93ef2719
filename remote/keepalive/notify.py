"""``[notify] webhook``: recoveries done, failed or given up, POSTed as JSON where a user will see them.

For the hours the laptop is closed and the keeper recovers alone. One small JSON object per event,
with a ``text`` line too, so a chat channel's incoming webhook (which reads ``text``) shows it: the
VM's words in it escaped (``<``, ``>``, ``&``: no mention, link or markup of theirs) and bounded.
Sent from one background thread through a bounded queue: a slow or dead endpoint never delays a
recovery, and its failures are logged (without the URL, which often holds a token), never raised.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import Any

from gcptui.remote.keepalive.events import RecoveryEvent, now
from gcptui.remote.safe_text import one_line

log = logging.getLogger(__name__)

# The events a user wants to hear of when nobody watches: the end of each recovery.
OUTCOMES = {"resumed": "recovered", "failed": "recovery failed", "gave_up": "gave up"}
MAX_QUEUED = 100
TIMEOUT = 10.0
MAX_DETAIL = 500  # characters of an event's detail (a VM's error line) carried onward
MAX_TEXT = 1000  # characters of the chat line, whatever the machine's name and detail hold


def chat_escaped(text: str) -> str:
    """``text`` as inert chat text: Slack (and Mattermost) read ``<...>`` as links and mentions
    (``<!channel>``, ``<https://evil|click here>``) and ``&`` as an entity; escaped they show as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class WebhookNotifier:
    """Call it with every ``RecoveryEvent``; it POSTs the outcomes to ``url``."""

    def __init__(self, url: str, *, sender: str = "gcptui keep-alive") -> None:
        if not url.startswith(("https://", "http://")):
            raise ValueError("[notify] webhook must be an http(s) URL")
        self.url = url
        self.sender = sender
        self.sent = 0
        self.failed = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=MAX_QUEUED)
        self._thread = threading.Thread(target=self._run, name="gcptui-notify", daemon=True)
        self._thread.start()

    def __call__(self, event: RecoveryEvent) -> None:
        outcome = OUTCOMES.get(event.kind)
        if outcome is None:
            return
        detail = one_line(event.detail).strip()[:MAX_DETAIL]
        machine = one_line(event.name)[:200]
        # A VM's words reach the chat channel as text, never as its markup, and bounded.
        line = f"{self.sender}: {machine} {outcome}{': ' + detail if detail else ''}"
        body = {
            "event": event.kind,
            "outcome": outcome,
            "machine": machine,
            "at": event.at.isoformat(),
            "detail": detail,
            "sender": self.sender,
            "text": chat_escaped(line)[:MAX_TEXT],
        }
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            log.warning(
                "notify: %d events waiting for the webhook; dropped one for %s", MAX_QUEUED, event.name
            )

    def lease(self, kind: str, text: str) -> None:
        """The recovery lease's standing changed in a way a user must hear of (``kind``: ``paused``,
        ``unleased``, or back to normal): POSTed like an outcome, with no machine."""
        line = one_line(text).strip()[:MAX_DETAIL]
        body = {"event": f"lease_{kind}", "outcome": kind, "machine": "", "at": now().isoformat(),
                "detail": line, "sender": self.sender, "text": chat_escaped(f"{self.sender}: {line}")[:MAX_TEXT]}  # fmt: skip
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(body)

    def close(self, timeout: float = TIMEOUT) -> None:
        """Send what is queued (up to ``timeout``), then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        import requests

        session = requests.Session()
        while (body := self._queue.get()) is not None:
            try:
                response = session.post(self.url, json=body, timeout=TIMEOUT)
                if response.status_code >= 400:
                    raise OSError(f"HTTP {response.status_code}")
                self.sent += 1
            except (OSError, requests.RequestException) as err:
                self.failed += 1
                log.warning(
                    "notify: the webhook refused %s's event (%s)", body["machine"], type(err).__name__
                )
