"""Shared dialogs: the question before a destructive action, help."""
