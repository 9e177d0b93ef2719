"""Hyperparameter sweeps: the sweep file, trials, their state on the laptop, the scheduler."""
