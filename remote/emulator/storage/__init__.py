"""Cloud Storage for the demo: fake-gcs-server (not ours) on loopback."""
