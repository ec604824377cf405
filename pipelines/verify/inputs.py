"""What a verify run reads before it touches its output: the pairs folder (checked to be one it
can verify) and the texts of the pairs it scores (Beam-free).

Texts come from the embeddings the pairs were computed from, when the embed job kept them
(``--keep-text``), or from the corpus files (``--corpus``), read by id with the spec the embed
job recorded. A pair whose text is found in neither is refused, naming the id.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.io.embeddings import EmbeddingsDataset, require_compatible
from pipelines.io.pairs_output import PairsOutput
from pipelines.io.texts import recorded_corpus_spec, texts_from_corpus, texts_from_embeddings

# Missing ids named in the refusal.
SHOWN_MISSING = 5


def open_candidates(directory: str) -> PairsOutput:
    """The pairs folder to verify.

    Raises:
        FileNotFoundError, CorruptOutputError: as :meth:`PairsOutput.open`.
        ValueError: the folder was verified already, or written without a pairs threshold
            (its ``pairs/`` is empty: there is nothing to verify).
    """
    source = PairsOutput.open(directory)
    if source.verified:
        raise ValueError(
            f"--pairs {directory} was written by sbert verify (its scores are a cross-encoder's "
            "already); give the sbert pairs folder it was made from"
        )
    if source.threshold is None:
        raise ValueError(
            f"--pairs {directory} was written without --threshold, so its pairs/ holds no "
            "pairs; rerun sbert pairs with --threshold T"
        )
    return source


def pair_texts(
    source: PairsOutput, corpus: str | None, ids: Iterable[str]
) -> tuple[dict[str, str], str]:
    """``{id: text}`` of every id of ``ids``, and where the texts came from.

    Raises:
        ValueError: no source of texts (embeddings without texts and no ``corpus``), or an id
            whose text is in neither, naming it.
        FileNotFoundError: the embeddings moved (and no ``corpus``), or ``corpus`` matches no
            file.
    """
    wanted = set(ids)
    sources = source.embeddings_sources()
    if corpus is not None:
        recorded = next((manifest for _, manifest in sources if manifest), None)
        if recorded is None:
            raise ValueError(
                f"--corpus: the manifest of {source.directory} records no embeddings manifest, "
                "so how the corpus was read (format, id and text fields) is unknown"
            )
        found = texts_from_corpus(corpus, recorded_corpus_spec(recorded), wanted)
        origin = corpus
    else:
        with_text = [dataset for dataset in _embeddings(source, sources) if dataset.has_text]
        if not with_text:
            raise ValueError(
                f"the embeddings of {source.directory} were written without --keep-text, so "
                "they hold no texts; pass the corpus with --corpus GLOB"
            )
        found = texts_from_embeddings(with_text, wanted)
        origin = ", ".join(dataset.directory for dataset in with_text)
    missing = sorted(wanted.difference(found))
    if missing:
        shown = ", ".join(repr(item) for item in missing[:SHOWN_MISSING])
        more = f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
        raise ValueError(
            f"no text for the id {shown}{more} of the pairs in {source.directory} "
            f"({len(missing)} of {len(wanted)} ids; texts from {origin})"
        )
    return found, origin


def _embeddings(
    source: PairsOutput, sources: list[tuple[str, dict | None]]
) -> list[EmbeddingsDataset]:
    """The embeddings the pairs record, opened and checked against what the pairs recorded."""
    if not sources:
        raise ValueError(
            f"{source.directory}: its manifest names no embeddings; pass the corpus with "
            "--corpus GLOB"
        )
    datasets = []
    for directory, recorded in sources:
        try:
            dataset = EmbeddingsDataset.open(directory)
        except FileNotFoundError as err:
            raise FileNotFoundError(
                f"{err} (the embeddings of the pairs in {source.directory}, for their texts; "
                "if they moved, pass the corpus with --corpus GLOB)"
            ) from err
        if recorded:
            require_compatible(
                recorded, dataset.manifest, f"the pairs' embeddings and {dataset.directory}"
            )
        datasets.append(dataset)
    return datasets
