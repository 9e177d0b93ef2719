"""Artifact Registry: Docker repositories and their images, kept as folders (emulated)."""
