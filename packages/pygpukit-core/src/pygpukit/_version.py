"""The package version, on its own so that modules can read it without importing the package root."""

__version__ = "0.1.0"
