"""The einloop version: written into tuning logs, caches and exported libraries."""
__version__ = "0.1.0"
