"""The Compute Engine API (``compute.googleapis.com``): instances, disks, images, operations,
project metadata, zones, guest attributes and gcloud's batch endpoint."""
