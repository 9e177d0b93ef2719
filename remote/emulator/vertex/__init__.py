"""Vertex AI custom jobs (``aiplatform.googleapis.com`` v1): each worker a local process."""
