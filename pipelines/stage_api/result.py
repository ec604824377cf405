"""What a stage's ``run(options)`` returns: its output folder, its manifest and its summary, and
its main table as Arrow or pandas. Beam-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbert_pipeline.io.output_dir import join, listed_parts

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# The main table of each kind of output folder (the manifest's ``kind``): the folder of its part
# files ("" for the top) or its one file.
MAIN_PARTS = {"embeddings": "", "pairs": "pairs", "clusters": "assignments"}
MAIN_FILES = {"dedup": "groups.parquet", "index": "ids.parquet"}


@dataclass(frozen=True)
class Result:
    """A finished stage run.

    Attributes:
        output: the output folder, published (its manifest written last).
        manifest: the published manifest, as read back.
        summary: the stage's summary: its counts and measurements, with ``line()``, the one-line
            report the CLI prints.
    """

    output: str
    manifest: dict
    summary: Any

    def line(self) -> str:
        """The one-line human summary (what ``sbert <stage>`` prints)."""
        return self.summary.line()

    def to_arrow(self) -> pa.Table:
        """The output's main table, read from the files its manifest lists: the embeddings
        (``id``, ``embedding``, ...), the pairs (``id_a``, ``id_b``, ``score``), the cluster
        assignments, dedup's ``groups.parquet`` or an index's ``ids.parquet``.

        Raises:
            ValueError: the run published no table (a dry run, a search, a job only submitted,
                a model).
        """
        import pyarrow as pa
        import pyarrow.parquet as pq
        from sbert_pipeline.io.embeddings import parquet_source  # pyarrow: loaded when read

        tables = []
        for path in self._main_paths():
            with parquet_source(path) as source:
                tables.append(pq.read_table(source))
        return pa.concat_tables(tables) if tables else pa.table({})

    def to_pandas(self) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame (a vector is a numpy array per row)."""
        return self.to_arrow().to_pandas()

    def _main_paths(self) -> list[str]:
        kind = (self.manifest or {}).get("kind")
        if self.output and kind in MAIN_FILES:
            return [join(self.output, MAIN_FILES[kind])]
        if self.output and kind in MAIN_PARTS:
            folder = MAIN_PARTS[kind]
            listed = listed_parts(self.output, self.manifest, folder)
            if listed is not None:
                return listed
            # Manifests written before staged commits list no files: their parts by name.
            from sbert_pipeline.io.embeddings import shard_paths

            return shard_paths(join(self.output, folder))
        raise ValueError(
            "this run published no table to read (a dry run, a search, a job only submitted "
            "or a model folder)"
        )
