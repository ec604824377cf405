"""Entry points: option parsing, pipeline and training-run construction, and the `sbert` CLI."""
