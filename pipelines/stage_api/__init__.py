"""What every stage package shares: typed options (``options.py``, ``shared_options.py``), the
``Result`` of a run, the staged output, running Beam pipelines and the stops a user causes.

Imports only sbert_pipeline.io, sbert_pipeline.vectors and itself. See docs/architecture.md,
"Stages".
"""
