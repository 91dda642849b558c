"""Thin typed clients every app shares (STYLE.md §2.3): today the one webhook sender."""
