"""The Cloud Billing Catalog API (``cloudbilling.googleapis.com``): the prices gcptui shows."""
