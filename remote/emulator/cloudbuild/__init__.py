"""Cloud Build: builds whose docker steps make digest-addressed images (emulated)."""
