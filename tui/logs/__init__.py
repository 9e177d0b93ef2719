"""The logs screen: panes side by side or merged, the fast log view, the GPU panel."""
