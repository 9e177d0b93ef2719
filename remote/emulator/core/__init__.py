"""What every emulated Google API shares: one aiohttp server with bearer-token auth, Google's JSON
error shape, and a hook for middlewares the tests install (the discovery-document schema checker)."""
