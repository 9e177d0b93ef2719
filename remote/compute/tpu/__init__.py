"""The Cloud TPU backend: TPU VM nodes of ``[tpu] zones``, each a row whose workers are its hosts."""
