"""The Kubernetes API server of one emulated cluster: discovery, list (selectors, paging), watch,
get, create, patch, delete (graceful for pods), ``pods/log``; errors are ``Status`` objects.

Served over TLS on 127.0.0.1 with the cluster's own CA; every request must carry the emulator's
bearer token (on GKE a Google access token, as ``gke-gcloud-auth-plugin`` gives kubectl)."""

from __future__ import annotations

import asyncio
import base64
import copy
import hmac
import json
import re
import uuid
from typing import Any

from aiohttp import web

from gcptui.remote.aio import within
from gcptui.remote.emulator.gke.cluster import Cluster
from gcptui.remote.emulator.gke.exec import serve_exec
from gcptui.remote.emulator.gke.logs import serve_log
from gcptui.remote.emulator.gke.resources import Resource, find, group_list, resource_list, status
from gcptui.remote.emulator.gke.selectors import SelectorError, field_selector, label_selector
from gcptui.remote.emulator.gke.store import Event
from gcptui.remote.emulator.gke.table import table, wants_table

NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
KUBE_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.6-gke.1020000", "gitCommit": "", "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.22.12", "compiler": "gc", "platform": "linux/amd64"}  # fmt: skip


_NEW_STATUS: dict[str, dict[str, Any]] = {
    "StatefulSet": {"replicas": 0, "availableReplicas": 0},
    "Service": {"loadBalancer": {}},
}


def _default_service(spec: dict[str, Any], serial: int) -> None:
    """What the API server fills in a Service: its type, a cluster IP (none for a headless one),
    each port's protocol and target port."""
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        spec["clusterIP"] = f"34.118.{224 + serial // 250 % 16}.{serial % 250 + 2}"
    spec["clusterIPs"] = [spec["clusterIP"]]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))


class KubeError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = status(code, reason, message, details)


def _json(body: dict[str, Any], code: int = 200) -> web.Response:
    return web.Response(status=code, text=json.dumps(body), content_type="application/json")


def _answer(body: Any) -> Any:
    async def handler(request: web.Request) -> web.Response:
        return _json(body(request))

    return handler


def not_found(resource: Resource, name: str) -> KubeError:
    group = f".{resource.group}" if resource.group else ""
    return KubeError(404, "NotFound", f'{resource.name}{group} "{name}" not found',
                     {"name": name, "group": resource.group, "kind": resource.name})  # fmt: skip


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 (a strategic merge patch of maps is the same; its list keys are not modelled)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class KubeApi:
    def __init__(self, cluster: Cluster, token: str) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.token = token
        self.app = web.Application(middlewares=[self._middleware])
        r = self.app.router
        # Discovery paths answer with or without a trailing slash, as the API server's do.
        for slash in ("", "/"):
            r.add_get("/version" + slash, _answer(lambda _: KUBE_VERSION))
            r.add_get("/api" + slash, self._api_versions)
            r.add_get("/apis" + slash, _answer(lambda _: group_list()))
            r.add_get("/api/v1" + slash, _answer(lambda _: resource_list("")))
            r.add_get(
                "/apis/{group:apps|batch}/v1" + slash, _answer(lambda q: resource_list(q.match_info["group"]))
            )
        for prefix in ("/api/v1/", "/apis/{group:apps|batch}/v1/"):
            r.add_route("*", prefix + "{rest:.+}", self._resource)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            return _json(status(401, "Unauthorized", "Unauthorized"), 401)
        try:
            return await handler(request)
        except KubeError as error:
            return _json(error.body, error.body["code"])
        except web.HTTPNotFound:
            return _json(status(404, "NotFound", "the server could not find the requested resource"), 404)

    async def _api_versions(self, request: web.Request) -> web.Response:
        return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": self.cluster.endpoint}]})  # fmt: skip

    # -- routing -------------------------------------------------------------------------------------

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        group = request.match_info.get("group", "")
        parts = request.match_info["rest"].split("/")
        namespace = ""
        if parts[0] == "namespaces" and len(parts) >= 3:
            namespace, parts = parts[1], parts[2:]
        resource = find(group, parts[0])
        if resource is None or len(parts) > 3 or resource.namespaced != bool(namespace) and len(parts) > 1:
            raise web.HTTPNotFound()
        name = parts[1] if len(parts) > 1 else ""
        sub = parts[2] if len(parts) > 2 else ""
        if name and not NAME.match(name):
            raise not_found(resource, name)
        method = request.method
        if sub:
            if resource.name == "pods" and sub == "log" and method == "GET":
                return await serve_log(request, self.cluster, namespace, self._get(resource, namespace, name))
            if resource.name == "pods" and sub == "exec" and method in ("GET", "POST"):
                return await serve_exec(
                    request, self.cluster, namespace, self._get(resource, namespace, name)
                )
            if sub == "status" and method == "GET":
                return _json(self._get(resource, namespace, name))
            if sub == "scale" and resource.kind == "StatefulSet" and method in ("GET", "PATCH", "PUT"):
                return await self._scale(request, resource, namespace, name)
            raise web.HTTPNotFound()
        if method == "DELETE" and not name:
            return await self._delete_collection(request, resource, namespace)
        if method == "GET" and not name:
            if request.query.get("watch") in ("1", "true"):
                return await self._watch(request, resource, namespace)
            return self._list(request, resource, namespace)
        if method == "GET":
            found = self._get(resource, namespace, name)
            if wants_table(request.headers.get("Accept", "")):
                meta = {"resourceVersion": found["metadata"]["resourceVersion"]}
                printed = table(resource.name, [found], meta, request.query.get("includeObject", "Metadata"))
                if printed is not None:
                    return _json(printed)
            return _json(found)
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method, "")
        if verb not in resource.verbs or (verb == "create") == bool(name):
            return _json(
                status(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                ),
                405,
            )
        if verb == "create":
            return await self._create(request, resource, namespace)
        if verb == "patch":
            return await self._patch(request, resource, namespace, name)
        if verb == "update":
            return await self._update(request, resource, namespace, name)
        return await self._delete(request, resource, namespace, name)

    def _get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(resource.name, namespace, name)
        if obj is None:
            raise not_found(resource, name)
        return obj

    def _matcher(self, request: web.Request, namespace: str) -> Any:
        try:
            labels = label_selector(request.query.get("labelSelector", ""))
            fields = field_selector(request.query.get("fieldSelector", ""))
        except SelectorError as error:
            raise KubeError(400, "BadRequest", str(error)) from None
        return lambda o: (
            (not namespace or o["metadata"].get("namespace") == namespace) and labels(o) and fields(o)
        )

    # -- list and watch ------------------------------------------------------------------------------

    def _list(self, request: web.Request, resource: Resource, namespace: str) -> web.Response:
        match = self._matcher(request, namespace)
        items = [o for o in self.store.select(resource.name, namespace or None) if match(o)]
        version = str(self.store.version)
        after = ""
        if token := request.query.get("continue"):
            try:
                state = json.loads(base64.urlsafe_b64decode(token.encode()))
                version, after = str(state["rv"]), str(state["start"])
            except (ValueError, KeyError, TypeError):
                raise KubeError(
                    400,
                    "BadRequest",
                    "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
                ) from None
        key = lambda o: f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"  # noqa: E731
        items = [o for o in items if key(o) > after]
        meta: dict[str, Any] = {"resourceVersion": version}
        limit = request.query.get("limit", "")
        if limit.isdigit() and 0 < int(limit) < len(items):
            rest = len(items) - int(limit)
            items = items[: int(limit)]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"rv": int(version), "start": key(items[-1])}).encode()
            ).decode()
            meta["remainingItemCount"] = rest
        if wants_table(request.headers.get("Accept", "")):
            printed = table(resource.name, items, meta, request.query.get("includeObject", "Metadata"))
            if printed is not None:
                return _json(printed)
        body = {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": meta,
            "items": items,
        }
        return _json(body)

    async def _watch(self, request: web.Request, resource: Resource, namespace: str) -> web.StreamResponse:
        match = self._matcher(request, namespace)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self.store.watchers.add(queue)
        try:
            since = request.query.get("resourceVersion", "")
            if since and since != "0":
                if not since.isdigit() or (backlog := self.store.since(int(since))) is None:
                    raise KubeError(
                        410, "Expired", f"too old resource version: {since} ({self.store.version})"
                    )
            else:
                backlog = [
                    Event("ADDED", resource.name, copy.deepcopy(o), 0)
                    for o in self.store.select(resource.name, namespace or None)
                ]
            printed_as_table = wants_table(request.headers.get("Accept", ""))
            include = request.query.get("includeObject", "Metadata")
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            timeout = float(request.query.get("timeoutSeconds") or 1800)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            pending = list(backlog)
            try:
                while True:
                    for event in pending:
                        if event.resource == resource.name and match(event.obj):
                            shown: dict[str, Any] | None = event.obj
                            if printed_as_table:  # kubectl get -w: each event's object a one-row Table
                                meta = {"resourceVersion": event.obj["metadata"].get("resourceVersion", "")}
                                shown = table(resource.name, [event.obj], meta, include) or event.obj
                            line = json.dumps({"type": event.type, "object": shown}).encode() + b"\n"
                            await response.write(line)
                    try:
                        event = await within(max(0.0, deadline - loop.time()), queue.get())
                    except TimeoutError:
                        break
                    pending = [event]
                await response.write_eof()
            except ConnectionError:
                pass  # the client went away (kubectl got what it waited for)
            return response
        finally:
            self.store.watchers.discard(queue)

    # -- writes --------------------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.text())
        except ValueError as error:
            raise KubeError(400, "BadRequest", f"the object provided is unrecognized: {error}") from None
        if not isinstance(body, dict):
            raise KubeError(400, "BadRequest", "the object provided is not an object")
        return body

    def _check(self, resource: Resource, body: dict[str, Any], namespace: str) -> None:
        # The API server fills a missing apiVersion and kind from the URL (Python users often leave
        # them out); only ones that name another type are refused.
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        if body.get("kind") != resource.kind or body.get("apiVersion") != resource.api_version:
            raise KubeError(400, "BadRequest", f"the API version in the data ({body.get('apiVersion')}) does not match "
                            f"the expected API version ({resource.api_version})")  # fmt: skip
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise self._invalid(
                resource, "", "metadata.name", "Required value: name or generateName is required"
            )
        name = meta.get("name")
        if not isinstance(name, str) or not NAME.match(name) or len(name) > 253:
            raise self._invalid(resource, str(name), "metadata.name", "a lowercase RFC 1123 subdomain must consist of "
                                "lower case alphanumeric characters, '-' or '.'")  # fmt: skip
        if meta.get("namespace", namespace) != namespace:
            raise KubeError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if resource.kind == "ConfigMap":
            return  # data only: no spec
        spec = body.get("spec")
        if not isinstance(spec, dict):
            raise self._invalid(resource, name, "spec", "Required value")
        if resource.kind == "Service":
            return
        pod_spec = spec if resource.kind == "Pod" else (spec.get("template") or {}).get("spec")
        if not isinstance(pod_spec, dict) or not pod_spec.get("containers"):
            raise self._invalid(
                resource,
                name,
                "spec.containers" if resource.kind == "Pod" else "spec.template.spec.containers",
                "Required value",
            )
        if resource.kind == "StatefulSet":
            selector = (spec.get("selector") or {}).get("matchLabels") or {}
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                raise self._invalid(
                    resource,
                    name,
                    "spec.template.metadata.labels",
                    "`selector` does not match template `labels`",
                )

    def _invalid(self, resource: Resource, name: str, field: str, message: str) -> KubeError:
        text = f'{resource.kind} "{name}" is invalid: {field}: {message}'
        return KubeError(422, "Invalid", text, {"name": name, "group": resource.group, "kind": resource.kind,
                                                "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]})  # fmt: skip

    async def _create(self, request: web.Request, resource: Resource, namespace: str) -> web.Response:
        body = await self._body(request)
        self._check(resource, body, namespace)
        name = body["metadata"]["name"]
        if self.store.get(resource.name, namespace, name) is not None:
            group = f".{resource.group}" if resource.group else ""
            raise KubeError(409, "AlreadyExists", f'{resource.name}{group} "{name}" already exists',
                            {"name": name, "group": resource.group, "kind": resource.name})  # fmt: skip
        for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"):
            body["metadata"].pop(key, None)
        body.pop("status", None)
        if resource.kind == "Pod":
            return _json(self.cluster.create_pod(namespace, body), 201)
        if resource.kind == "StatefulSet":
            spec = body["spec"]
            spec.setdefault("replicas", 1)
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
            spec.setdefault("revisionHistoryLimit", 10)
        if resource.kind == "Job":
            spec = body["spec"]
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("completions", 1)
            spec.setdefault("parallelism", 1)
            spec["template"].setdefault("spec", {}).setdefault("restartPolicy", "Never")
            # The API server's own selector (manualSelector unset): the job's pods by its uid.
            uid = body["metadata"]["uid"] = str(uuid.uuid4())
            own = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
            spec["selector"] = {"matchLabels": own}
            meta = spec["template"].setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **own, "job-name": body["metadata"]["name"],
                              "batch.kubernetes.io/job-name": body["metadata"]["name"]}  # fmt: skip
        if resource.kind == "Service":
            _default_service(body["spec"], self.store.version)
        # The status the API server's defaulting gives a new object (clients' models require
        # a StatefulSet's replicas); the controllers fill the rest in. A ConfigMap has none.
        if resource.kind != "ConfigMap":
            body["status"] = _NEW_STATUS.get(resource.kind, {})
        return _json(self.store.create(resource.name, namespace, body), 201)

    def _store_change(self, resource: Resource, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        for key in ("uid", "name", "namespace", "creationTimestamp", "deletionTimestamp"):
            if key in old["metadata"]:
                new["metadata"][key] = old["metadata"][key]
        if "status" in old:
            new["status"] = old["status"]
        new["kind"], new["apiVersion"] = old["kind"], old["apiVersion"]
        if resource.kind == "Pod" and new.get("spec") != old.get("spec"):
            raise self._invalid(
                resource,
                old["metadata"]["name"],
                "spec",
                "Forbidden: pod updates may not change fields other than image",
            )
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return self.store.update(resource.name, new)

    async def _patch(
        self, request: web.Request, resource: Resource, namespace: str, name: str
    ) -> web.Response:
        old = self._get(resource, namespace, name)
        kind = request.content_type
        if kind not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            return _json(
                status(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json",
                ),
                415,
            )
        new = merge_patch(copy.deepcopy(old), await self._body(request))
        return _json(self._store_change(resource, old, new))

    async def _update(
        self, request: web.Request, resource: Resource, namespace: str, name: str
    ) -> web.Response:
        old = self._get(resource, namespace, name)
        body = await self._body(request)
        self._check(resource, body, namespace)
        given = body["metadata"].get("resourceVersion")
        if given and given != old["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", f'Operation cannot be fulfilled on {resource.name} "{name}": the object '
                            "has been modified; please apply your changes to the latest version and try again")  # fmt: skip
        return _json(self._store_change(resource, old, body))

    async def _scale(
        self, request: web.Request, resource: Resource, namespace: str, name: str
    ) -> web.Response:
        """``statefulsets/NAME/scale`` (``kubectl scale``): the replica count as an autoscaling/v1 Scale."""
        obj = self._get(resource, namespace, name)
        if request.method != "GET":
            body = await self._body(request)
            replicas = (body.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise self._invalid(
                    resource, name, "spec.replicas", "Invalid value: must be greater than or equal to 0"
                )
            new = copy.deepcopy(obj)
            new["spec"]["replicas"] = replicas
            obj = self._store_change(resource, obj, new)
        meta = obj["metadata"]
        selector = ",".join(
            f"{k}={v}" for k, v in sorted(obj["spec"]["selector"].get("matchLabels", {}).items())
        )
        return _json({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta},
            "spec": {"replicas": obj["spec"].get("replicas", 1)},
            "status": {"replicas": (obj.get("status") or {}).get("replicas", 0), "selector": selector},
        })  # fmt: skip

    async def _delete_collection(
        self, request: web.Request, resource: Resource, namespace: str
    ) -> web.Response:
        """``deletecollection``: every object the selectors match goes (pods gracefully); the answer
        is the list of them, as the API server gives it."""
        if "deletecollection" not in resource.verbs:
            return _json(
                status(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                ),
                405,
            )
        match = self._matcher(request, namespace)
        grace = request.query.get("gracePeriodSeconds", "")
        gone = []
        for obj in [o for o in self.store.select(resource.name, namespace or None) if match(o)]:
            if resource.kind == "Pod":
                gone.append(self.cluster.delete_pod(obj, float(grace) if grace.isdigit() else None))
                continue
            for pod in self.cluster._owned(obj):
                self.cluster.delete_pod(pod)
            self.store.remove(resource.name, obj)
            gone.append(obj)
        return _json({"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                      "metadata": {"resourceVersion": str(self.store.version)}, "items": gone})  # fmt: skip

    async def _delete(
        self, request: web.Request, resource: Resource, namespace: str, name: str
    ) -> web.Response:
        obj = self._get(resource, namespace, name)
        options = await self._body(request) if request.can_read_body else {}
        grace = options.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))
        if grace is not None and not (isinstance(grace, int) or str(grace).isdigit()):
            raise KubeError(
                400, "BadRequest", f"gracePeriodSeconds: invalid value {grace!r}: a whole number of seconds"
            )
        if resource.kind == "Pod":
            return _json(self.cluster.delete_pod(obj, None if grace is None else float(grace)))
        # Owned pods go with their owner (background propagation, kubectl's default).
        for pod in self.cluster._owned(obj):
            self.cluster.delete_pod(pod)
        self.store.remove(resource.name, obj)
        if resource.kind == "Service":
            return _json(obj)  # the one kind whose registry answers the deleted object
        # Gone at once (no finalizer holds it): the API server answers a Status, not the object.
        meta = obj["metadata"]
        details = {"name": meta["name"], "group": resource.group, "kind": resource.name, "uid": meta["uid"]}
        return _json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        )
