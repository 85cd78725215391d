"""Data files written for this project (no third-party datasets here: those are read from ../shared/evaldata)."""
