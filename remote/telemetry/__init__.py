"""Telemetry: log streams, GPU samples, progress metrics, idle detection."""
