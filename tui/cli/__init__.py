"""The headless command line: one module per command group. Never imports Textual (the TUI loads lazily)."""
