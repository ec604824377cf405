"""What a verify run reads before it touches its output: the pairs folder (checked to be one it
can verify) and the texts of the pairs it scores (Beam-free).

Texts come from the embeddings the pairs were computed from, when the embed job kept them
(``--keep-text``) or the own vectors were read with a ``--text-field``, and only from the very
version the pairs recorded; or from the corpus files (``--corpus``), read by id with the spec the
embed job recorded (``--id-field``, ``--text-field``, ``--format`` override it, and name the id
field of the corpus of own vectors). A pair whose text is found in neither is refused, naming
the id.
"""

from __future__ import annotations

from collections.abc import Iterable

from sbert_pipeline.io.corpus_reader import CorpusSpec
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.io.texts import recorded_corpus_spec, texts_from_corpus, texts_from_embeddings
from sbert_pipeline.verify.options import Options

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
    source: PairsOutput, options: Options, ids: Iterable[str]
) -> tuple[dict[str, str], str]:
    """``{id: text}`` of every id of ``ids``, and where the texts came from: ``options.corpus``
    (read as the embed job read it, or with the given fields), else the embeddings the pairs
    were computed from (kept texts, or own vectors' text column), checked to be the version the
    pairs recorded.

    Raises:
        ValueError: no source of texts (embeddings without texts and no corpus), a corpus whose
            id field is unknown, embeddings made again since the pairs (naming both versions),
            or an id whose text is in neither, naming it.
        FileNotFoundError: the embeddings moved (and no corpus), or the corpus matches no file.
    """
    wanted = set(ids)
    if options.corpus is not None:
        recorded = next((manifest for _, manifest in source.embeddings_sources() if manifest), {})
        spec = _corpus_spec(source, recorded, options)
        found = texts_from_corpus(options.corpus, spec, wanted, recorded)
        origin = options.corpus
    else:
        datasets = source.open_embeddings(moved="pass the corpus with --corpus GLOB")
        with_text = [dataset for dataset in datasets if dataset.has_text]
        if not with_text:
            raise ValueError(_no_texts(source, datasets[0]))
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


def _corpus_spec(source: PairsOutput, recorded: dict, options: Options) -> CorpusSpec:
    """How to read ``--corpus``: as the embed job recorded it (``recorded``, its manifest), the
    given fields overriding.

    Raises:
        ValueError: the pairs record no embed job (own vectors, or no manifest) and no
            ``--id-field`` is given: the ids could not be matched.
    """
    if "input" not in recorded and options.id_field is None:
        raise ValueError(
            f"--corpus: the pairs in {source.directory} were not computed from an sbert embed "
            "output, so how its ids were read is unknown; give --id-field FIELD (and "
            "--text-field, --format where the defaults do not fit)"
        )
    return recorded_corpus_spec(recorded, options.format, options.text_field, options.id_field)


def _no_texts(source: PairsOutput, dataset: EmbeddingsDataset) -> str:
    """Why the embeddings hold no texts, and what to pass instead."""
    if "external" in dataset.manifest:
        return (
            f"the own vectors of the pairs in {source.directory} ({dataset.directory}) were "
            "read without --text-field, so they hold no texts; pass the corpus with --corpus "
            "GLOB --id-field FIELD"
        )
    return (
        f"the embeddings of {source.directory} were written without --keep-text, so they hold "
        "no texts; pass the corpus with --corpus GLOB"
    )
