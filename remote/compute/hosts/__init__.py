"""Static SSH hosts (``[[hosts]]``): machines gcptui reaches over SSH but neither starts nor stops."""
