"""The curves screen (``v``) and what it draws, shared with ``gcptui plot`` (data.py is Textual-free)."""
