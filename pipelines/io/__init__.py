"""Folder contracts and file I/O shared by every stage.

Output directories committed by their manifest, Arrow schemas, the embeddings reader,
corpus files, sizes, atomic writes, report HTML. May use Beam's FileSystems; defines no
Beam transform. See docs/architecture.md.
"""
