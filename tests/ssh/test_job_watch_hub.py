"""One job watch per machine for every follower in the process (``JobWatches``): the TUI's job
column and keep-alive's notice watcher share it. On a real sshd: one remote watch command however
many follow, a late follower told what a watch of its own would have said first (the state, the
current run's preemption notice), and the remote command gone once the last follower leaves."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.emulator.hosts.metadata import MetadataServer
from gcptui.remote.jobs.watch_hub import JobWatches
from tests.ssh.conftest import make_runner, wait_for
from tests.ssh.emulated import watching
from tests.ssh.test_preemption_notice import TRAPPER, _remote_watches, _true, watcher_processes


async def test_followers_share_one_watch_and_a_late_one_hears_the_state_and_the_notice(
    host: Reach, remote_home: Path
) -> None:
    metadata = MetadataServer({"instance/preempted": "FALSE"})
    address = await metadata.start("127.0.0.1")
    hub = JobWatches(remote_home=str(remote_home))
    try:
        runner = make_runner(remote_home, command=TRAPPER,
                             env={"GCE_METADATA_HOST": address, "GCPTUI_METADATA_FETCHER": "curl"})  # fmt: skip
        started = await runner.start(host)
        pgid = started.pgid
        assert pgid is not None
        async with watching(hub.watch(host.channel, host.name)) as first:
            await first.wait("state", where=lambda e: e.status is not None and e.status.pid == started.pid)
            alone = _remote_watches(remote_home)
            assert alone and hub.running() == 1
            async with watching(hub.watch(host.channel, host.name)) as second:
                _, told = await second.wait("state")  # at once: the watch's latest snapshot
                assert told.status is not None and told.status.pid == started.pid
                assert _remote_watches(remote_home) == alone and hub.running() == 1
            # The second left; the first still follows the one watch.
            await wait_for(lambda: _true(any("wait_for_change" in c for c in watcher_processes(pgid))),
                           what="the notice watcher's long poll")  # fmt: skip
            await metadata.set("instance/preempted", "TRUE")
            _, notice = await first.wait("preempted")
            await first.wait("ended")
            # Joining after the notice, as keep-alive's watcher may: it hears it too, once.
            async with watching(hub.watch(host.channel, host.name)) as late:
                _, heard = await late.wait("preempted")
                assert heard.status is not None and heard.status.preempted_at == notice.status.preempted_at  # type: ignore[union-attr]
                assert late.kinds()[:2] == ["state", "preempted"]
                assert (heard.status.state, heard.status.detail) == ("exited", "preempted")
        # Nobody follows: the watch and its remote command end.
        await wait_for(lambda: _true(_remote_watches(remote_home) == []), what="the remote watch to end")
        assert hub.running() == 0
    finally:
        await hub.close()
        await metadata.close()
