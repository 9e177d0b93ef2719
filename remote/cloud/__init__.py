"""Compute Engine: the REST client, its errors turned into one line with the fix, gcloud's configuration, the fleet list."""
