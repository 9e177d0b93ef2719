"""``instances.setMetadata``: replace one instance's metadata, only with its current fingerprint (412
otherwise), as GCE does. An instance's ``ssh-keys`` authorize logins to it alone; the project's
(``projects.setCommonInstanceMetadata``) to every instance that does not block them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gcptui.remote.emulator.compute.fleet import Fleet
from gcptui.remote.emulator.compute.resources import operation_json
from gcptui.remote.emulator.compute.state import new_fingerprint, same_fingerprint
from gcptui.remote.emulator.core.errors import ApiError


def metadata_handler(fleet: Fleet) -> Any:
    async def set_metadata(request: web.Request) -> web.Response:
        vm = fleet.find(request.match_info["zone"], request.match_info["name"])
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        if not isinstance(body, dict) or body.get("fingerprint") is None:
            raise ApiError(400, "Required field 'fingerprint' not specified", "required")
        if not same_fingerprint(body["fingerprint"], vm.metadata_fingerprint):
            raise ApiError(
                412, "Supplied fingerprint does not match current metadata fingerprint.", "conditionNotMet"
            )
        items = body.get("items") or []
        if any(not isinstance(item, dict) or "key" not in item for item in items):
            raise ApiError(
                400, "Invalid value for field 'resource.items': every item needs a key.", "invalid"
            )
        vm.metadata = {item["key"]: str(item.get("value", "")) for item in items}
        vm.metadata_fingerprint = new_fingerprint()
        op = fleet._user_operation(vm, "setMetadata")  # noqa: SLF001 - the room's own fleet
        op.finish()  # the guest agent reads it at once here; GCE's takes seconds (callers wait either way)
        return web.json_response(operation_json(op, fleet.project))

    return set_metadata
