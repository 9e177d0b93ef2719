"""Everything that talks to the world: config, GCE, SSH, sync, jobs, logs, GPU, keep-alive, emulator.

Never imports textual: the faces in ``tui/`` render the typed results these services produce.
"""
