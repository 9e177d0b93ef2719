"""Transfers between the VMs (or the checkpoint bucket) and the laptop: pull results back."""
