"""The one aiohttp application every emulated API mounts its routes on.

Each API (``compute/``, ``oslogin/``, ``billing/``, later ``tpu/``, ``vertex/``, ``logging/``,
``gke/``) adds its routes to ``ApiServer.app``; paths never collide because each Google API has its
own prefix (``/compute/v1``, ``/v1/users``, ``/v1/services``, ...), as on one shared endpoint.

The server checks the bearer token and turns ``ApiError`` into Google's error shape. Middlewares in
``extra_middlewares`` (the tests' schema checker) run outside both, so they see every exchange,
the 401s and 404s included.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from gcptui.remote.emulator.core.errors import STATUS_NAMES, ApiError, error_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

UNAUTHENTICATED = (
    "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or "
    "other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
)

# Middlewares every new server installs outside its own (tests/helpers/schema.py adds the discovery
# checker here once per test process, so every emulator a test starts is checked).
extra_middlewares: list[Middleware] = []


class ApiServer:
    """The aiohttp application: auth, error bodies, and the routes the APIs add."""

    def __init__(self, token: str, middlewares: Sequence[Middleware] = ()) -> None:
        self.token = token  # every call must carry ``Authorization: Bearer <token>``
        # Tokens that stand for one account (token -> e-mail), for APIs that act on the caller's own
        # resources (OS Login, whose handlers tell them apart). ``token`` stands for no account in
        # particular: its holder acts as whichever account it names.
        self.principals: dict[str, str] = {}
        self.app = web.Application(middlewares=[*extra_middlewares, *middlewares, self._middleware])

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self._authorized(request):
            response = error_response(401, UNAUTHENTICATED, "required")
            response.headers["WWW-Authenticate"] = 'Bearer realm="https://accounts.google.com/"'
            return response
        try:
            return await handler(request)
        except ApiError as err:
            return error_response(err.status, err.message, err.reason)
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
            # Google routes by method and path together: a method it does not serve on a path is an
            # unknown URL too, answered in its JSON error shape (never aiohttp's plain-text 405).
            message = f"The requested URL {request.path} was not found on this server."
            return error_response(404, message, "notFound")
        except web.HTTPException as raised:
            if raised.status < 400 or raised.status not in STATUS_NAMES:
                raise
            return error_response(
                raised.status, raised.reason, "invalid" if raised.status == 400 else "error"
            )

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        given = given.strip()
        if hmac.compare_digest(given.encode(), self.token.encode()):
            return True
        return any(hmac.compare_digest(given.encode(), token.encode()) for token in self.principals)
