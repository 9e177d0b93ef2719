"""One cluster's Kubernetes API through kubernetes_asyncio (aiohttp, which gcptui already ships):
its kubeconfig loader (contexts, CA data, tokens, exec plugins such as gke-gcloud-auth-plugin) and
its transport; bodies are read as bounded JSON and parsed by ``workloads.py``, never trusted.

A GKE cluster named by resource name is reached as ``gcloud container clusters get-credentials``
would: endpoint and CA from the Container API, a Google access token as the bearer token.

The backend's methods are blocking (callers run them in worker threads): each call runs its own
event loop in the calling thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gcptui.remote.errors import CloudError, NotFoundError
from gcptui.remote.safe_text import one_line

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient, Configuration

T = TypeVar("T")
MAX_BODY = 64 * 1024 * 1024  # one list page (500 objects) is far below this
MAX_ITEMS = 10_000
PAGE = 500
TIMEOUT = 30.0

# (kind, API path of the namespaced collection)
COLLECTIONS = {"StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets", "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
               "Pod": "/api/v1/namespaces/{ns}/pods"}  # fmt: skip


class KubeCluster:
    """How to reach one cluster: a kubeconfig context, or a server, its CA and a token source."""

    def __init__(self, label: str, *, kubeconfig: str | None = None, context: str | None = None,
                 server: Callable[[], tuple[str, bytes]] | None = None,
                 token: Callable[[], str] | None = None) -> None:  # fmt: skip
        self.label = label
        self.kubeconfig = kubeconfig
        self.context = context
        self.server = server  # () -> (https URL, CA PEM): the Container API's answer
        self.token = token
        self._ca_dir: tempfile.TemporaryDirectory[str] | None = None

    async def configuration(self) -> Configuration:
        from kubernetes_asyncio import config
        from kubernetes_asyncio.client import Configuration

        configuration = Configuration()
        if self.server is not None and self.token is not None:
            url, ca = await asyncio.to_thread(self.server)
            if self._ca_dir is None:
                self._ca_dir = tempfile.TemporaryDirectory(prefix="gcptui-gke-")
            ca_file = Path(self._ca_dir.name) / "ca.crt"
            ca_file.write_bytes(ca)
            configuration.host = url
            configuration.ssl_ca_cert = str(ca_file)
            token = await asyncio.to_thread(self.token)
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
            return configuration
        try:
            await config.load_kube_config(config_file=self.kubeconfig, context=self.context,
                                          client_configuration=configuration)  # fmt: skip
        except (config.ConfigException, OSError) as err:
            raise CloudError(f"[[gke]] {self.label}: cannot use kubeconfig context {self.context!r} "
                             f"({one_line(str(err))[:200]}): check `kubectl config get-contexts`") from None  # fmt: skip
        return configuration

    def run(self, work: Callable[[ApiClient], Awaitable[T]]) -> T:
        """``work`` with a client of this cluster, on an event loop of the calling thread."""

        async def main() -> T:
            from kubernetes_asyncio.client import ApiClient

            async with ApiClient(await self.configuration()) as api:
                return await work(api)

        try:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(main())
            # Called on an event loop's thread (a blocking call, as the other backends' HTTP is):
            # its own loop in a helper thread.
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gcptui-gke") as pool:
                return pool.submit(asyncio.run, main()).result()
        except CloudError:
            raise
        except (OSError, TimeoutError) as err:
            raise CloudError(
                f"[[gke]] {self.label}: the cluster's API server did not answer ({one_line(str(err))[:200]})"
            ) from None

    async def request(self, api: ApiClient, method: str, path: str, query: list[tuple[str, str]] | None = None,
                      body: Any = None, content_type: str = "application/json") -> Any:  # fmt: skip
        """One call; the JSON answer (bounded), or a one-line error from the ``Status`` it got."""
        from kubernetes_asyncio.client.exceptions import ApiException

        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            response = await api.call_api(path, method, query_params=query or [], header_params=headers, body=body,
                                          auth_settings=["BearerToken"], _preload_content=False,
                                          _request_timeout=TIMEOUT)  # fmt: skip
        except ApiException as err:
            raise _error(self.label, method, path, err.status, err.body) from None
        raw = response[0] if isinstance(response, tuple) else response
        data = await _read_bounded(raw, MAX_BODY + 1)
        if raw.status >= 400:  # without preloading, the client leaves the status to us
            raise _error(self.label, method, path, raw.status, data[:65536])
        if len(data) > MAX_BODY:
            raise CloudError(f"[[gke]] {self.label}: {path} answered more than {MAX_BODY} bytes")
        try:
            return json.loads(data)
        except ValueError:
            raise CloudError(f"[[gke]] {self.label}: {path} did not answer JSON") from None

    async def delete(self, api: ApiClient, path: str, *, background: bool = True) -> Any:
        """Delete the object at ``path`` (its dependents in the background, as kubectl does)."""
        policy = "Background" if background else "Foreground"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy}
        return await self.request(api, "DELETE", path, body=body)

    async def open(self, api: ApiClient, path: str, query: list[tuple[str, str]]) -> Any:
        """A streamed GET (a log): the aiohttp response to read and release, or a one-line error."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            response = await api.call_api(path, "GET", query_params=query, header_params={"Accept": "*/*"},
                                          auth_settings=["BearerToken"], _preload_content=False)  # fmt: skip
        except ApiException as err:
            raise _error(self.label, "GET", path, err.status, err.body) from None
        raw = response[0] if isinstance(response, tuple) else response
        if raw.status >= 400:
            body = await raw.content.read(65536)
            raw.release()
            raise _error(self.label, "GET", path, raw.status, body)
        return raw

    async def list(
        self, api: ApiClient, path: str, selector: str = "", fields: str = ""
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = [("limit", str(PAGE))]
            query += [("labelSelector", selector)] if selector else []
            query += [("fieldSelector", fields)] if fields else []
            query += [("continue", token)] if token else []
            page = await self.request(api, "GET", path, query)
            found = page.get("items") if isinstance(page, dict) else None
            items.extend(i for i in found or [] if isinstance(i, dict))
            meta = page.get("metadata") if isinstance(page, dict) else None
            token = meta.get("continue", "") if isinstance(meta, dict) else ""
            if not token or not isinstance(token, str) or len(items) >= MAX_ITEMS:
                return items[:MAX_ITEMS]


class ConflictError(CloudError):
    """409: the object changed since it was read (its resourceVersion), or already exists."""


def _error(label: str, method: str, path: str, status: int | None, body: object) -> CloudError:
    message = ""
    try:
        parsed = json.loads(body) if isinstance(body, (str, bytes)) else {}
        message = one_line(str(parsed.get("message", "")))[:300] if isinstance(parsed, dict) else ""
    except ValueError:
        pass
    message = message or f"HTTP {status}"
    if status == 404:
        return NotFoundError(f"[[gke]] {label}: not found ({message}): check `gcptui ls`")
    if status == 409:
        return ConflictError(f"[[gke]] {label}: {method} {path} refused: 409 {message}")
    if status in (401, 403):
        return CloudError(f"[[gke]] {label}: {method} {path} denied ({message}): check the cluster's credentials "
                          "(`gcloud container clusters get-credentials`) and RBAC")  # fmt: skip
    return CloudError(f"[[gke]] {label}: {method} {path} refused: {status} {message}")


async def _read_bounded(raw: Any, limit: int) -> bytes:
    """Up to ``limit`` bytes of the body: aiohttp's ``read(n)`` answers what has arrived so far, so a
    large answer read once came back cut (and then failed to parse as JSON)."""
    data = b""
    while len(data) < limit:
        chunk = await raw.content.read(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data
