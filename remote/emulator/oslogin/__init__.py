"""The Cloud OS Login API (``oslogin.googleapis.com``): login profiles and imported SSH keys."""
