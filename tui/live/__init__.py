"""What is known live about each machine and how its cells read: shared by the CLI and the TUI, free of Textual."""
