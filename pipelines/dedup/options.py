"""Options of the dedup stage (``sbert dedup``, ``sbert run``'s ``dedup:``, ``dedup.Options``).

Beam-free and numpy-free: the command line is generated from these fields
(``jobs/options_cli.py``). Dedup runs in this process, so it takes no Beam options.
"""

from __future__ import annotations

from dataclasses import dataclass

from sbert_pipeline.dedup.choices import (
    DEFAULT_COMPONENTS_KEEP,
    DEFAULT_KEEP,
    DEFAULT_METHOD,
    DEFAULT_MUTUAL_K,
    DEFAULT_RADIUS_GAP,
    KEEP_CHOICES,
    KNOWN_FIELD,
    LABEL_COLUMN,
    LABEL_ID_A,
    LABEL_ID_B,
    NO_KNOWN_FIELD,
    Method,
    StableKeep,
    SweepScope,
    canonical_keep,
    default_keep,
    is_keep,
)
from sbert_pipeline.stage_api.options import OptionError, StageOptions, at_least, in_range, option
from sbert_pipeline.stage_api.shared_options import (
    checked_memory_budget,
    memory_budget_option,
    overwrite_option,
    seed_option,
    verify_option,
)

from sbert_core.tabular import FORMATS


@dataclass(frozen=True)
class Options(StageOptions):
    """How to deduplicate the pairs of an ``sbert pairs`` output (see
    ``pipelines/dedup/stage.py``)."""

    INPUT_OPTIONS = ("pairs", "embeddings", "corpus", "against", "labels")

    pairs: str | None = option(
        help="an sbert pairs output directory (required unless --against with --embeddings)"
    )
    output: str | None = option(help="output directory (not with --dry-run)")
    threshold: float = option(help="cosine at or above which pairs join", required=True)
    method: Method = option(
        DEFAULT_METHOD,
        f"how pairs become groups (default: {DEFAULT_METHOD}: it does not chain; components "
        "chains as corpora grow, see the description above)",
    )
    keep: str | None = option(
        help=f"which member of a group is kept, with every method: {', '.join(KEEP_CHOICES)} "
        "(first: first in the corpus; central: the member most like the most others; random: "
        "by --seed; column:NAME: a numeric corpus field, largest first, needs --corpus). "
        f"Default: {DEFAULT_COMPONENTS_KEEP} with components, {DEFAULT_KEEP} with the other "
        "methods. Old spellings: --rank, and corpus for first",
        aliases=("--rank",),
        metavar="POLICY",
    )
    # The old name of ``keep`` (it applied to the methods other than components), so configs
    # and calls written with it still run; the command line spells it --rank, an alias of --keep.
    rank: str | None = option(help="old name of keep", in_cli=False)
    seed: int = seed_option("seed of --keep random")
    radius: float | None = option(
        help=f"star, split: the least score of a member with its representative (default: "
        f"T - {DEFAULT_RADIUS_GAP:g}, not below the pairs' threshold; the sweep keeps the gap)"
    )
    mutual_k: int = option(
        DEFAULT_MUTUAL_K, f"mutual: neighbours per item (default: {DEFAULT_MUTUAL_K})"
    )
    missing_score: float = option(
        0.0, "average: the score of a pair that is not loaded (default: 0)"
    )
    labels: str | None = option(
        help="labelled pairs (TSV, CSV, JSONL, Parquet; .gz): two id columns and a 0/1 label; "
        "P/R/F1 of every method at every sweep threshold"
    )
    label_id_a: str = option(LABEL_ID_A, f"first id column ({LABEL_ID_A})")
    label_id_b: str = option(LABEL_ID_B, f"second id column ({LABEL_ID_B})")
    label_column: str = option(LABEL_COLUMN, f"0/1 label column ({LABEL_COLUMN})")
    skip_unknown_labels: bool = option(
        False, "leave out (and count) labelled pairs naming ids that were not embedded"
    )
    target_precision: float | None = option(
        help="with --labels: also find the threshold of highest recall with precision >= P"
    )
    known_duplicates_field: str | None = option(
        help=f"a field the embeddings kept (sbert embed --keep-fields) that names, on a "
        f"duplicate's row, the id of the row it duplicates; the report and the manifest give "
        f"how many of these pairs each method put in one group (default: {KNOWN_FIELD} "
        f"when the embeddings kept it, else the labelled duplicates of --labels; "
        f"{NO_KNOWN_FIELD}: off)",
        metavar="FIELD",
    )
    corpus: str | None = option(
        help="glob of the corpus the embeddings were made from: the corpus order for --keep "
        "first, texts for --keep longest and the report, the field of --keep column:NAME, and "
        "the rows --apply writes"
    )
    apply: bool = option(False, "write the deduplicated corpus (needs --corpus)")
    id_field: str | None = option(help="corpus id field (default: as the embed job read it)")
    text_field: str | None = option(help="corpus text field (default: as the embed job)")
    format: str | None = option(
        help="corpus format (default: as the embed job)", cli={"choices": FORMATS}
    )
    embeddings: tuple[str, ...] = option(
        (),
        "the embeddings the pairs were computed from, if they moved since (default: as "
        "named in the pairs manifest)",
    )
    against: tuple[str, ...] = option(
        (),
        "reference embeddings (one or more folders, the corpus's model identity): remove "
        "every corpus row whose cosine with a reference row is >= --threshold, by exact "
        "search of corpus x reference; reference rows are never removed nor listed in the id "
        "lists. Alone (no --pairs; the corpus is --embeddings) only those rows are removed, "
        "each grouped with its most similar reference row; with --pairs the corpus is also "
        "deduplicated and a corpus group holding such a row is removed whole",
        metavar="REF_EMBEDDINGS",
    )
    stable_keep: StableKeep = option(
        "auto",
        "auto (default): when --output holds a dedup version made with the same settings that "
        "decide groups (threshold, method, keep rule, radius, mutual-k, missing-score, the seed "
        "of keep random), the rows it kept stay kept (a new row that duplicates one is the one "
        "removed); with any of them changed, dedup decides afresh and the summary line says "
        "which changed. on: keep its decisions even with changed settings. off: always decide "
        "afresh (a previously kept row may be removed). Never across another model identity; "
        "the manifest's stable_keep says which happened and why. Group ids stay where "
        "membership did not change. Replacing the version needs --overwrite. In YAML quote on "
        "and off: 'off' (a bare off is false)",
    )
    sweep_from: float = option(0.80, "lowest sweep threshold")
    sweep_to: float = option(0.99, "highest sweep threshold")
    sweep_step: float = option(0.01, "sweep step")
    sweep: SweepScope = option(
        "chosen",
        "which methods the threshold sweep runs: chosen (default: the --method only, which is "
        "all a run needs) or all (every method, for the comparison in the report, the "
        "manifest's methods and --labels calibration of every method; about six times the work)",
    )
    report_groups: int = option(50, "largest groups shown in report.html")
    dry_run: bool = option(False, "print the threshold sweep only; write nothing")
    overwrite: bool = overwrite_option()
    verify: bool = verify_option("the pairs' and the embeddings' files")
    memory_budget: str = memory_budget_option()

    def check(self) -> None:
        """Refuse values and combinations that cannot work, before any input is read."""
        in_range("threshold", self.threshold, -1.0, 1.0)
        if self.dry_run and self.apply:
            raise OptionError("apply", "--dry-run writes nothing; leave out --apply")
        if self.pairs is None and not (self.against and self.embeddings):
            raise OptionError(
                "pairs", "required, unless --against REF with the corpus's --embeddings DIR"
            )
        if not self.dry_run and self.output is None:
            raise OptionError("output", "required (unless --dry-run)")
        if self.apply and self.corpus is None:
            raise OptionError("apply", "writes the deduplicated corpus and needs --corpus GLOB")
        at_least("report_groups", self.report_groups, 0)
        field = self.known_duplicates_field
        if field is not None and (not field.strip() or field in ("id", "embedding")):
            raise OptionError(
                "known_duplicates_field",
                f"must name a corpus field the embeddings kept, got {field!r}",
            )
        if self.format is not None and self.format not in FORMATS:
            raise OptionError("format", f"must be one of {', '.join(FORMATS)}, got {self.format!r}")
        checked_memory_budget(self.memory_budget)
        self._check_keep()
        self._check_method_settings()
        self._check_labels()
        self._check_sweep()

    def _check_keep(self) -> None:
        """Fold the old spellings into ``keep`` (``rank``, ``corpus``), then check its value."""
        if self.rank is not None:
            if self.keep is not None and canonical_keep(self.keep) != canonical_keep(self.rank):
                raise OptionError("rank", "is the old name of keep: give one of them")
            object.__setattr__(self, "keep", self.rank)
            object.__setattr__(self, "rank", None)
        if self.keep is None:
            return
        object.__setattr__(self, "keep", canonical_keep(self.keep))
        if not is_keep(self.keep):
            raise OptionError(
                "keep", f"must be one of {', '.join(KEEP_CHOICES)}; got {self.keep!r}"
            )
        if self.keep.startswith("column:") and self.corpus is None:
            raise OptionError("keep", f"{self.keep} reads the field from the corpus: pass --corpus")

    def _check_method_settings(self) -> None:
        """The star/split radius, mutual's k and average linkage's missing score."""
        if self.radius is not None:
            if self.method not in ("star", "split"):
                raise OptionError("radius", f"is for --method star or split, not {self.method}")
            in_range("radius", self.radius, -1.0, 1.0)
            if self.radius > self.threshold:
                raise OptionError(
                    "radius", f"must not exceed --threshold {self.threshold:g}; got {self.radius}"
                )
        at_least("mutual_k", self.mutual_k, 1)
        in_range("missing_score", self.missing_score, -1.0, 1.0)

    def _check_labels(self) -> None:
        in_range("target_precision", self.target_precision, 0.0, 1.0)
        if self.target_precision is not None and self.labels is None:
            raise OptionError("target_precision", "is measured on labelled pairs: pass --labels")

    def _check_sweep(self) -> None:
        in_range("sweep_from", self.sweep_from, -1.0, 1.0)
        in_range("sweep_to", self.sweep_to, -1.0, 1.0)
        if self.sweep_from > self.sweep_to:
            raise OptionError(
                "sweep_from", f"must not exceed --sweep-to {self.sweep_to:g}; got {self.sweep_from}"
            )
        if not self.sweep_step > 0:  # written so that NaN is refused
            raise OptionError("sweep_step", f"must be positive, got {self.sweep_step}")

    def keep_for(self, method: str) -> str:
        """The member ``method`` keeps of each group: ``keep``, else the method's default."""
        return self.keep if self.keep is not None else default_keep(method)
