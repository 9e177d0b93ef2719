"""The Cloud TPU API v2 as JSON over google-auth's session: nodes, their operations, guest attributes.

``tpu.googleapis.com`` (or ``[gcp] api_endpoint``'s root, where the emulator serves every API) with
the credentials of the Compute reads. Errors become one line that says what to do.
"""

from __future__ import annotations

import time
from typing import Any

from gcptui.remote.cloud.auth import endpoint_url
from gcptui.remote.cloud.compute_rest import JsonApi
from gcptui.remote.errors import CloudError, NotFoundError
from gcptui.remote.safe_text import one_line

TPU_ENDPOINT = "https://tpu.googleapis.com"
MAX_NODES = 10_000  # a listing longer than this is cut (never read without bound)
OPERATION_TIMEOUT = 1200.0


def _message(response: Any) -> str:
    try:
        error = response.json().get("error", {})
        return one_line(str(error.get("message", "")))[:300] or f"HTTP {response.status_code}"
    except ValueError:
        return f"HTTP {response.status_code}"


class TpuRest:
    """One project's TPU nodes over REST."""

    def __init__(self, credentials: Any, api_endpoint: str, project: str, *, timeout: float = 30.0) -> None:
        root = endpoint_url(api_endpoint) if api_endpoint else TPU_ENDPOINT
        self.project = project
        self.base = f"{root}/v2/projects/{project}"
        self.json = JsonApi(credentials, self.base, timeout=timeout)
        self.timeout = timeout
        self.poll_seconds = 0.5

    def _error(self, action: str, response: Any) -> CloudError:
        status = response.status_code
        message = _message(response)
        if status in (401, 403):
            return CloudError(
                f"Permission denied to {action} in project {self.project} ({message}): ask for roles/tpu.admin, "
                "or run `gcloud services enable tpu.googleapis.com` if the API is off"
            )
        if status == 404:
            return NotFoundError(f"cannot {action}: not found ({message}): check `gcptui ls`")
        if status == 429 or "RESOURCE_EXHAUSTED" in message or "no more capacity" in message.lower():
            return CloudError(
                f"no TPU capacity to {action} ({message}): keep-alive retries; or try another zone"
            )
        return CloudError(f"Cloud TPU API refused to {action}: {status} {message}")

    def _get(self, path: str, action: str) -> Any:
        from google.api_core import exceptions as api

        try:
            return self.json.get(path)
        except api.NotFound:
            return None
        except api.GoogleAPICallError as err:
            raise CloudError(
                f"Cloud TPU API refused to {action}: {err.code} {one_line(err.message)[:300]}"
            ) from None
        except api.RetryError:
            raise CloudError(f"Cloud TPU API did not answer to {action}: try again later") from None

    def list_nodes(self, zone: str) -> list[dict[str, Any]]:
        from google.api_core import exceptions as api

        nodes: list[dict[str, Any]] = []
        try:
            for page in self.json.pages(f"/locations/{zone}/nodes"):
                found = page.get("nodes", []) if isinstance(page, dict) else []
                nodes.extend(n for n in found if isinstance(n, dict))
                if len(nodes) >= MAX_NODES:
                    break
        except api.GoogleAPICallError as err:
            raise CloudError(f"{err.code} {one_line(err.message)[:300]}") from None
        except api.RetryError:
            raise CloudError("the Cloud TPU API did not answer: try again later") from None
        return nodes[:MAX_NODES]

    def get_node(self, zone: str, name: str) -> dict[str, Any] | None:
        found = self._get(f"/locations/{zone}/nodes/{name}", f"read TPU node {name}")
        return found if isinstance(found, dict) else None

    def host_keys(self, zone: str, name: str) -> list[tuple[str, str]]:
        """Each worker's ed25519 host key (algorithm, base64), in worker order, from its guest attributes."""
        response = self.json.session.post(
            f"{self.base}/locations/{zone}/nodes/{name}:getGuestAttributes",
            json={"queryPath": "hostkeys/", "workerIds": [""]},
            timeout=self.timeout,
        )
        if response.status_code >= 400:
            raise self._error(f"read the host keys of TPU node {name}", response)
        from gcptui.remote.cloud.published_keys import published_host_key

        keys: list[tuple[str, str]] = []
        for index, worker in enumerate(response.json().get("guestAttributes", [])[:4096]):
            items = (worker.get("queryValue") or {}).get("items", []) if isinstance(worker, dict) else []
            found = [i for i in items if isinstance(i, dict) and i.get("key") == "ssh-ed25519"]
            # The worker wrote this itself: exactly one key, re-exported, or nothing (published_keys.py).
            value = str(found[0].get("value", "")) if found else ""
            key = (
                published_host_key(f"TPU node {name} worker {index}", "ssh-ed25519", value) if value else None
            )
            keys.append(("ssh-ed25519", key.split(" ")[1]) if key else ("", ""))
        if any(not key for _, key in keys):
            return []  # a worker without its key yet (still booting): try again on the next listing
        return keys

    # -- changes: each waits for its long-running operation ---------------------------------------------

    def _call(self, method: str, path: str, action: str, **options: Any) -> dict[str, Any]:
        response = self.json.session.request(method, f"{self.base}{path}", timeout=self.timeout, **options)
        if response.status_code >= 400:
            raise self._error(action, response)
        operation = response.json()
        return self._wait(operation, action)

    def _wait(self, operation: dict[str, Any], action: str) -> dict[str, Any]:
        deadline = time.monotonic() + OPERATION_TIMEOUT
        name = str(operation.get("name", ""))
        root = self.base.rsplit("/v2/", 1)[0]
        while not operation.get("done"):
            if time.monotonic() > deadline:
                raise CloudError(f"{action} did not finish within {OPERATION_TIMEOUT:.0f}s: see `gcptui ls`")
            time.sleep(self.poll_seconds)
            response = self.json.session.get(f"{root}/v2/{name}", timeout=self.timeout)
            if response.status_code == 429 or response.status_code >= 500:
                continue  # a rate limit or outage on the reads: the operation goes on, poll it again
            if response.status_code >= 400:
                raise self._error(f"follow the operation to {action}", response)
            operation = response.json()
        error = operation.get("error")
        if isinstance(error, dict):
            raise CloudError(f"cannot {action}: {one_line(str(error.get('message', 'failed')))[:300]}")
        return operation

    def act(self, zone: str, name: str, verb: str) -> None:
        self._call("POST", f"/locations/{zone}/nodes/{name}:{verb}", f"{verb} TPU node {name}", json={})

    def delete_node(self, zone: str, name: str) -> None:
        self._call("DELETE", f"/locations/{zone}/nodes/{name}", f"delete TPU node {name}")

    def create_node(self, zone: str, name: str, body: dict[str, Any]) -> None:
        self._call(
            "POST", f"/locations/{zone}/nodes", f"create TPU node {name}", params={"nodeId": name}, json=body
        )
