"""Every row's id, held as one Arrow string array rather than Python strings (Beam-free).

A dedup run at 5M rows held each id as a Python string three times over (a list for the
outputs, another for the report, and a ``{id: row}`` dict): about 230 bytes a row, a third of
its peak (docs/architecture.md, "Dedup memory"). :class:`ItemIds` keeps the Arrow array the
embeddings were read into (~15 bytes a row for short ids) and makes Python strings only for
the rows a step asks for, in bounded chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Rows turned into Python strings at a time when iterating (bounds the transient objects).
CHUNK_ROWS = 65_536


def string_array(values: pa.Array | pa.ChunkedArray | Sequence[str]) -> pa.Array:
    """Values as one plain ``string`` array (Parquet may give chunks, ``large_string`` or
    dictionaries; a Python sequence is converted)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if not isinstance(values, pa.Array):
        return pa.array(list(values), pa.string())
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    return values if values.type == pa.string() else values.cast(pa.string())


class ItemIds(Sequence[str]):
    """A read-only sequence of ids (``ids[row]`` is a ``str``) over a ``string`` Arrow array.

    Args:
        array: the ids, one per row, none null (the caller checked them).
    """

    def __init__(self, array: pa.Array | pa.ChunkedArray) -> None:
        self.array: pa.Array = string_array(array)

    @classmethod
    def of(cls, ids: ItemIds | pa.Array | Sequence[str]) -> ItemIds:
        """``ids`` as :class:`ItemIds` (itself when it already is one)."""
        return ids if isinstance(ids, ItemIds) else cls(string_array(ids))

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return self.array[row].to_pylist()
        return self.array[int(row)].as_py()

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self.array), CHUNK_ROWS):
            yield from self.array.slice(start, CHUNK_ROWS).to_pylist()

    def take(self, rows: np.ndarray | Sequence[int]) -> list[str]:
        """The ids of ``rows``, in that order."""
        return self.array.take(pa.array(np.asarray(rows, np.int64))).to_pylist()

    def iter_rows(self, rows: np.ndarray) -> Iterator[str]:
        """The ids of ``rows`` (``(m,)`` int64), in that order, a chunk at a time."""
        for start in range(0, len(rows), CHUNK_ROWS):
            yield from self.take(rows[start : start + CHUNK_ROWS])

    def rows_of(self, values: pa.Array | Iterable[str]) -> np.ndarray:
        """``(m,)`` int64 row of every value, -1 where it is not an id here."""
        found = pc.index_in(string_array(values), value_set=self.array)
        return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    def index(self) -> dict[str, int]:
        """``{id: row}`` as a dict, for the steps that look ids up one at a time (a corpus
        scan). Costs ~100 bytes a row: built only when such a step runs."""
        return {item: row for row, item in enumerate(self)}
