"""Vertex AI's ``customJobs`` and Cloud Logging's ``entries:list`` as plain JSON over google-auth.

Why not ``google-cloud-aiplatform``'s ``aiplatform_v1`` clients: the package pulls a large tree of
proto-plus messages (seconds to import, tens of MB installed) for five REST calls whose JSON we
map into our own models anyway. The GCE read path (``cloud/compute_rest.py``) made the same choice;
this reuses its ``JsonApi`` (paging, retries of 429/5xx and rate limits, api_core's errors) and its
credentials, so every Google call of a process authenticates once.

Endpoints: ``[gcp] api_endpoint`` when set (the emulator serves every API at its root); otherwise
Google's regional ``https://REGION-aiplatform.googleapis.com`` and ``https://logging.googleapis.com``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from gcptui.remote.cloud.compute_rest import JsonApi
from gcptui.remote.cloud.errors import translated
from gcptui.remote.errors import CloudError

LOG_PAGE = 1000  # Cloud Logging's largest page


class VertexRest:
    """One project's custom jobs and their log entries."""

    def __init__(
        self, project: str, api_endpoint: str, credentials: Any, token_file: str | None = None
    ) -> None:
        self.project = project
        self.api_endpoint = api_endpoint.rstrip("/")
        self.credentials = credentials
        self.token_file = token_file
        self._apis: dict[str, JsonApi] = {}
        self._lock = threading.Lock()

    def _api(self, base: str) -> JsonApi:
        with self._lock:  # the fleet refresh and a command may ask from two threads
            if base not in self._apis:
                self._apis[base] = JsonApi(self.credentials, base)
            return self._apis[base]

    def _vertex(self, region: str) -> JsonApi:
        return self._api(self.api_endpoint or f"https://{region}-aiplatform.googleapis.com")

    def _logging(self) -> JsonApi:
        return self._api(self.api_endpoint or "https://logging.googleapis.com")

    def _translated(self, action: str, access: str = "read"):  # type: ignore[no-untyped-def]
        endpoint = self.api_endpoint or "aiplatform.googleapis.com"
        return translated(project=self.project, endpoint=endpoint, action=action, access=access,  # type: ignore[arg-type]
                          token_file=self.token_file)  # fmt: skip

    @staticmethod
    def _region_of(name: str) -> str:
        parts = name.split("/")
        if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or parts[4] != "customJobs":
            raise CloudError(f"{name!r} is not a custom job's name (projects/P/locations/R/customJobs/ID)")
        return parts[3]

    def list_jobs(self, region: str) -> list[dict[str, Any]]:
        """Every custom job of ``region``, newest first."""
        path = f"/v1/projects/{self.project}/locations/{region}/customJobs"
        with self._translated(f"list the Vertex AI custom jobs of {region}"):
            return [job for page in self._vertex(region).pages(path) for job in page.get("customJobs", [])]

    def get_job(self, name: str) -> dict[str, Any]:
        with self._translated(f"read {name}"):
            return dict(self._vertex(self._region_of(name)).get(f"/v1/{name}"))

    def create_job(self, region: str, body: dict[str, Any]) -> dict[str, Any]:
        """Submit a job (not retried: a create is not idempotent)."""
        path = f"/v1/projects/{self.project}/locations/{region}/customJobs"
        with self._translated(f"submit a Vertex AI custom job in {region}", "write"):
            return self._post(self._vertex(region), path, body)

    def cancel_job(self, name: str) -> None:
        with self._translated(f"cancel {name}", "write"):
            self._post(self._vertex(self._region_of(name)), f"/v1/{name}:cancel", {})

    def delete_job(self, name: str) -> None:
        """Delete an ended job (Vertex answers a long-running operation, done at once for a job)."""
        api = self._vertex(self._region_of(name))
        with self._translated(f"delete {name}", "write"):
            response = api.session.delete(f"{api.base_url}/v1/{name}", timeout=api.timeout)
            if response.status_code >= 400:
                from google.api_core import exceptions

                raise exceptions.from_http_response(response)

    def _post(self, api: JsonApi, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = api.session.post(api.base_url + path, json=body, timeout=api.timeout)
        if response.status_code >= 400:
            from google.api_core import exceptions

            raise exceptions.from_http_response(response)
        try:
            return dict(response.json())
        except ValueError:
            raise CloudError(
                f"{api.base_url} answered something that is not JSON: check [gcp] api_endpoint"
            ) from None

    def entries(
        self, filter_: str, *, descending: bool = False, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Log entries of the project matching ``filter_``, oldest first (or newest), page by page."""
        body: dict[str, Any] = {
            "resourceNames": [f"projects/{self.project}"],
            "filter": filter_,
            "orderBy": "timestamp desc" if descending else "timestamp asc",
            "pageSize": min(limit or LOG_PAGE, LOG_PAGE),
        }
        given = 0
        with self._translated("read Cloud Logging entries"):
            while True:
                page = self._post(self._logging(), "/v2/entries:list", body)
                for entry in page.get("entries", []):
                    yield entry
                    given += 1
                    if limit is not None and given >= limit:
                        return
                token = page.get("nextPageToken")
                if not token:
                    return
                body["pageToken"] = token
