"""The TUI's sweep screen: trials table with the leader highlighted."""
