"""Beam transforms for the SBERT pipeline stages, and the Beam-free helpers they wrap."""
