"""The emulator checked against Google's discovery documents (google-api-python-client's offline copies)."""
