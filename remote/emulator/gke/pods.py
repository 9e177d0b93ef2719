"""Pods as local processes: each container run of a pod is a process group in the pod's own directory
(lost when the pod is replaced, as a container's filesystem is), its output in a kubelet-style log
file per run (``<RFC 3339 nano> <line>``), restarted per the pod's ``restartPolicy``."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from gcptui.remote.aio import within
from gcptui.remote.emulator.gke.store import Store, now_rfc3339
from gcptui.remote.emulator.hosts.vm_processes import MARKER, end_vm_processes

MAX_LINE = 16384
RESTART_BACKOFF = 0.2  # seconds; the kubelet's is 10 s doubling, too slow for tests


def nano_stamp() -> str:
    at = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int((at % 1) * 1e9):09d}Z"


class ImageSource(Protocol):
    """Artifact Registry's images, as a node pulls them: ``(root filesystem, config)`` or None (a
    name only: the container's own command runs)."""

    def resolve(self, uri: str) -> tuple[Path, dict[str, Any]] | None: ...


class PodRunner:
    """Runs one pod's first container until the pod ends or is deleted. An image Artifact Registry
    holds runs as the kubelet runs it: its files copied into the pod's folder at each start, its
    WORKDIR the working directory, its ENV under the container's, ``command`` replacing its
    ENTRYPOINT and ``args`` its CMD."""

    def __init__(self, store: Store, root: Path, pod: dict[str, Any], bin_dir: Path | None,
                 images: ImageSource | None = None) -> None:  # fmt: skip
        self.images = images
        self.store = store
        self.namespace, self.name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.directory = root / "pods" / self.namespace / f"{self.name}-{self.uid[:8]}"
        self.logs = root / "logs" / self.namespace / self.name
        self.bin_dir = bin_dir
        self.process: asyncio.subprocess.Process | None = None
        self.stopping = False
        self.task: asyncio.Task[None] | None = None

    def pod(self) -> dict[str, Any] | None:
        pod = self.store.get("pods", self.namespace, self.name)
        return pod if pod is not None and pod["metadata"]["uid"] == self.uid else None

    def log_file(self, restart: int) -> Path:
        return self.logs / f"{restart}.log"

    def _env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        paths = [str(self.bin_dir)] if self.bin_dir else []
        env = {"PATH": os.pathsep.join([*paths, str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               "HOME": str(self.directory), "HOSTNAME": self.name, "LANG": "C.UTF-8",
               "KUBERNETES_SERVICE_HOST": "127.0.0.1",
               MARKER: self.uid}  # every process of the pod, exec'd and detached ones too: its cgroup  # fmt: skip
        for item in container.get("env") or []:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            if "value" in item:
                env[item["name"]] = str(item["value"])
            elif (ref := (item.get("valueFrom") or {}).get("fieldRef")) and ref.get(
                "fieldPath"
            ) == "metadata.name":
                env[item["name"]] = self.name
        return env

    def _set(self, **status: Any) -> dict[str, Any] | None:
        pod = self.pod()
        if pod is None:
            return None
        pod["status"].update(status)
        return self.store.update("pods", pod)

    def _container_status(self, pod: dict[str, Any], state: dict[str, Any], ready: bool, **more: Any) -> None:
        container = pod["spec"]["containers"][0]
        statuses = pod["status"].get("containerStatuses") or [{
            "name": container["name"], "image": container.get("image", ""), "imageID": "",
            "restartCount": 0}]  # fmt: skip
        statuses[0].update(state=state, ready=ready, started=ready, **more)
        statuses[0].setdefault("containerID", "")
        pod["status"]["containerStatuses"] = statuses
        ready_text = "True" if ready else "False"
        for condition in pod["status"]["conditions"]:
            if condition["type"] in ("Ready", "ContainersReady") and condition["status"] != ready_text:
                condition.update(status=ready_text, lastTransitionTime=now_rfc3339())

    async def run(self) -> None:
        restarts = 0
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        shutil.rmtree(self.logs, ignore_errors=True)  # a new pod of the same name: a new log
        self.logs.mkdir(parents=True)
        while not self.stopping:
            pod = self.pod()
            if pod is None:
                return
            container = pod["spec"]["containers"][0]
            argv = [*(container.get("command") or []), *(container.get("args") or [])]
            image = self.images.resolve(str(container.get("image", ""))) if self.images is not None else None
            cwd = self.directory
            if image is not None:
                rootfs, config = image
                argv = [*(container.get("command") or config.get("entrypoint") or []),
                        *(container.get("args") or ([] if container.get("command") else config.get("cmd") or []))]  # fmt: skip
                await asyncio.to_thread(shutil.copytree, rootfs, self.directory, dirs_exist_ok=True)
                cwd = self.directory.joinpath(
                    *[p for p in Path(str(config.get("workdir") or "/")).parts if p != "/"]
                )
                cwd.mkdir(parents=True, exist_ok=True)
                container = {**container, "env": [{"name": str(k), "value": str(v)} for k, v in
                                                  (config.get("env") or {}).items()] + list(container.get("env") or [])}  # fmt: skip
            started = now_rfc3339()
            code = await self._run_once(pod, container, argv, restarts, started, cwd)
            pod = self.pod()
            if pod is None or self.stopping:
                return
            terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                          "startedAt": started, "finishedAt": now_rfc3339(), "containerID": ""}  # fmt: skip
            policy = pod["spec"].get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                restarts += 1
                self._container_status(pod, {"waiting": {"reason": "CrashLoopBackOff" if code else "Completed"}},
                                       False, restartCount=restarts, lastState={"terminated": terminated})  # fmt: skip
                self.store.update("pods", pod)
                await asyncio.sleep(RESTART_BACKOFF)
                continue
            self._container_status(pod, {"terminated": terminated}, False)
            pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            self.store.update("pods", pod)
            return

    async def _run_once(self, pod: dict[str, Any], container: dict[str, Any], argv: list[str], restart: int,
                        started: str, cwd: Path | None = None) -> int:  # fmt: skip
        log = self.log_file(restart).open("ab")
        try:
            if not argv:
                log.write(f"{nano_stamp()} the emulator runs the container's command: the image "
                          "is a name only and has no entrypoint here\n".encode())  # fmt: skip
                return 127
            try:
                self.process = await asyncio.create_subprocess_exec(
                    *argv, cwd=cwd or self.directory, env=self._env(pod, container), stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)  # fmt: skip
            except OSError as error:
                log.write(f"{nano_stamp()} exec {argv[0]}: {error.strerror}\n".encode())
                return 127
            pod["status"].update(phase="Running")
            pod["status"].setdefault("startTime", started)
            self._container_status(pod, {"running": {"startedAt": started}}, True, restartCount=restart)
            self.store.update("pods", pod)
            assert self.process.stdout is not None
            pending = b""
            while chunk := await self.process.stdout.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > MAX_LINE:
                    lines.append(pending[:MAX_LINE])
                    pending = b""
                for line in lines:
                    log.write(nano_stamp().encode() + b" " + line[:MAX_LINE] + b"\n")
                log.flush()
            if pending:
                log.write(nano_stamp().encode() + b" " + pending + b"\n")
            return await self.process.wait()
        finally:
            log.close()
            self.process = None

    async def stop(self, grace: float) -> None:
        """SIGTERM every process of the pod (the container's, and what exec started, even detached with
        setsid, as the kubelet ends a container's whole cgroup), SIGKILL after ``grace`` seconds."""
        self.stopping = True
        await end_vm_processes(self.uid, grace)
        process = self.process
        if process is not None and process.returncode is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    await within(wait, asyncio.shield(process.wait()))
                    break
                except TimeoutError:
                    continue
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
