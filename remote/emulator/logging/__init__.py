"""Cloud Logging v2 (``logging.googleapis.com``): the log entries the emulated Vertex AI workers write."""
