"""How a batch's failed operations read: which leave the VM short of the tree, and their words."""

from __future__ import annotations

from gcptui.remote.sync.events import BatchApplied

# How the agent's refusal to change an existing directory's mode begins (sync_agent.KEPT_MODE).
KEPT_MODE = "kept the mode of "


def kept_on_vm(op: str, path: str, message: str) -> bool:
    """True for a refusal that leaves the VM holding more than the tree, none of it less: a delete
    the agent refused (the path holds what the VM wrote, or changed there since sync wrote it), or
    the mode of a directory the VM already had and sync may not change (another user's)."""
    return (op == "rm" and message.startswith("kept ")) or (op == "mkdir" and message.startswith(KEPT_MODE))


def failure_line(op: str, path: str, message: str) -> str:
    """The warning for one failed operation (a refusal's text already names its path)."""
    if op == "rm":
        return message
    if op == "read":
        return f"not synced: cannot read {path} ({message}); the VM keeps its copy"
    return f"could not {op} {path} on the VM: {message}"


def incomplete(event: BatchApplied, failure: str, unlisted: dict[str, str]) -> str:
    """Why ``event`` left the VM short of the tree ("" when it did not): a job must not start on
    part of it. ``failure``: the batch's first failed operation; ``unlisted``: local folders that
    could not be read (the VM holds an unknown, maybe older, copy of them)."""
    if event.failed:
        return failure
    if unlisted:
        unread = sorted(unlisted.items())
        rel, reason = unread[0]
        more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
        return f"cannot read {rel or 'the source'} ({reason}){more}"
    return ""
