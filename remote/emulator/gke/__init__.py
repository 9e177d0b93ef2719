"""The emulator's GKE room: the Container API (``/v1/projects/P/locations/L/clusters``) and, per
emulated cluster, a Kubernetes API server over TLS whose pods run as local processes."""
