"""Punctual: a serverless, distributed job scheduler. The core shared by every function."""

__version__ = "0.1.0"
