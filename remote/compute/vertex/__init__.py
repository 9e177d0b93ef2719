"""Vertex AI custom jobs as fleet rows: listing, cancel, logs from Cloud Logging, submit."""
