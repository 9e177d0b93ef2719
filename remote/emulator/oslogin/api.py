"""The OS Login API, as far as SSH needs it: login profiles with a POSIX account and imported keys.

``GET /v1/users/{user}/loginProfile``, ``POST /v1/users/{user}:importSshPublicKey`` and ``DELETE
/v1/users/{user}/sshPublicKeys/{fingerprint}`` answer in the REST shapes of ``oslogin.googleapis.com``; the first touch of an account creates its POSIX account
(user name from the e-mail address, as Google derives it: ``ada@example.com`` → ``ada_example_com``).
Emulated VMs with ``enable-oslogin`` (their own metadata, else the project's) let in only these
users, with the keys imported into their profiles.

As on Google, a principal reaches only its own profile: a caller holding an account's own token
(``principal_token``) gets 403 on another account's. The emulator's main token stands for no account
in particular (one credential for the whole emulated organisation): its holder acts as the account it
names.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.core.errors import ApiError


@dataclass
class Profile:
    email: str
    username: str
    uid: int
    keys: dict[str, str] = field(default_factory=dict)  # SHA-256 fingerprint -> "type base64 [comment]"


def posix_name(email: str) -> str:
    """The POSIX user name Google gives an account: non-alphanumerics become ``_``, at most 32 chars."""
    return re.sub(r"[^a-z0-9]", "_", email.lower())[:32]


def fingerprint(key: str) -> str:
    """The hex SHA-256 of the key's blob, how the API names imported keys."""
    parts = key.split()
    if len(parts) < 2:
        raise ApiError(400, "Invalid SSH public key.", "invalid")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except ValueError:
        raise ApiError(400, "Invalid SSH public key.", "invalid") from None
    return hashlib.sha256(blob).hexdigest()


class OsLoginProfiles:
    """Every account's profile in the emulated organisation."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.profiles: dict[str, Profile] = {}
        self.calls: dict[str, int] = {}
        self.principals: dict[str, str] = {}  # bearer token -> the account it stands for

    def principal_token(self, email: str) -> str:
        """A bearer token that stands for ``email`` alone (a VM's service account, say)."""
        token = secrets.token_urlsafe(32)
        self.principals[token] = email
        return token

    def own_profile(self, request: web.Request) -> Profile:
        """The profile the path names, refused (403, as Google) to a principal that is not its owner."""
        email = request.match_info["user"]
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        principal = self.principals.get(given.strip()) if scheme.lower() == "bearer" else None
        if principal is not None and principal != email:
            raise ApiError(403, "The caller does not have permission", "forbidden")
        return self.profile(email)

    def profile(self, email: str) -> Profile:
        if "@" not in email:
            raise ApiError(404, f"User {email} not found.", "notFound")
        if email not in self.profiles:
            self.profiles[email] = Profile(email, posix_name(email), 1000 + len(self.profiles))
        return self.profiles[email]

    def allows(self, username: str, key_blob: bytes) -> bool:
        """Whether ``username`` may log in with the public key whose wire blob is ``key_blob``."""
        digest = hashlib.sha256(key_blob).hexdigest()
        return any(p.username == username and digest in p.keys for p in self.profiles.values())

    def profile_json(self, profile: Profile) -> dict[str, Any]:
        keys = {
            fp: {"key": key, "fingerprint": fp, "name": f"users/{profile.email}/sshPublicKeys/{fp}"}
            for fp, key in profile.keys.items()
        }
        return {
            "name": profile.email,
            "posixAccounts": [
                {
                    "primary": True,
                    "username": profile.username,
                    "uid": str(profile.uid),
                    "gid": str(profile.uid),
                    "homeDirectory": f"/home/{profile.username}",
                    "shell": "/bin/bash",
                    "gecos": "",
                    "systemId": "",
                    "accountId": self.project,
                    "operatingSystemType": "LINUX",
                    "name": f"users/{profile.email}/projects/{self.project}",
                }
            ],
            "sshPublicKeys": keys,
        }

    async def get_login_profile(self, request: web.Request) -> web.Response:
        self.calls["getLoginProfile"] = self.calls.get("getLoginProfile", 0) + 1
        return web.json_response(self.profile_json(self.own_profile(request)))

    async def import_ssh_public_key(self, request: web.Request) -> web.Response:
        self.calls["importSshPublicKey"] = self.calls.get("importSshPublicKey", 0) + 1
        profile = self.own_profile(request)
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        key = str((body or {}).get("key") or "").strip()
        if not key:
            raise ApiError(400, "Required field 'key' not specified.", "required")
        profile.keys[fingerprint(key)] = key
        return web.json_response({"loginProfile": self.profile_json(profile)})

    async def delete_ssh_public_key(self, request: web.Request) -> web.Response:
        """``users.sshPublicKeys.delete``: the key named by its fingerprint; 404 when the profile has
        no such key; ``Empty`` (``{}``) when it is gone."""
        self.calls["deleteSshPublicKey"] = self.calls.get("deleteSshPublicKey", 0) + 1
        profile = self.own_profile(request)
        fp = request.match_info["fingerprint"]
        if profile.keys.pop(fp, None) is None:
            raise ApiError(404, f"Public key {fp} not found.", "notFound")
        return web.json_response({})

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/users/{user}/loginProfile", self.get_login_profile)
        app.router.add_post(r"/v1/users/{user:[^/:]+}:importSshPublicKey", self.import_ssh_public_key)
        app.router.add_delete("/v1/users/{user}/sshPublicKeys/{fingerprint}", self.delete_ssh_public_key)
