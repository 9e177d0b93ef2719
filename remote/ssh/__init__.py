"""SSH: targets (user, key, host key alias, proxy), the connection pool, host keys."""
