"""Package list only (everything else is in pyproject.toml): the folders under tui/ and remote/,
named as they install, below the `gcptui` namespace (pyproject's package-dir maps the folders)."""

from setuptools import find_packages, setup

setup(packages=[f"gcptui.{name}" for name in find_packages(include=["tui", "tui.*", "remote", "remote.*"])])
