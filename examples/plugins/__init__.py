"""Worked plug-ins written only against fedray's public API (see docs/extending.md)."""
