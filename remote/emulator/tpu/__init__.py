"""The Cloud TPU API (``tpu.googleapis.com`` v2) of the emulated project: nodes of worker hosts."""
