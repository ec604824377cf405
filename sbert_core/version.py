"""The version of sbert-pipeline, in a module of its own so that any module of the package can
read it without importing the package's ``__init__`` (which names every public module)."""

__version__ = "0.1.0"
