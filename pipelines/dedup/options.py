"""Options of the dedup stage (``sbert dedup``, ``sbert run``'s ``dedup:``, ``dedup.Options``)
and the settings derived from them once (numpy-free: the command line is generated from these
fields; dedup runs in this process, so it takes no Beam options).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sbert_pipeline.grouping.choices import (
    DEFAULT_KEEP,
    DEFAULT_MAX_GROUP_SIZE,
    DEFAULT_METHOD,
    DEFAULT_MUTUAL_K,
    DEFAULT_RADIUS_GAP,
    KEEP_CHOICES,
    RADIUS_METHODS,
    Method,
    canonical_keep,
    is_keep,
)
from sbert_pipeline.stage_api.old_spellings import Sets
from sbert_pipeline.stage_api.options import OptionError, StageOptions, at_least, in_range, option
from sbert_pipeline.stage_api.shared_options import (
    checked_memory_budget,
    memory_budget_option,
    overwrite_option,
    verify_option,
)

from sbert_core.tabular import FORMATS

if TYPE_CHECKING:
    from sbert_pipeline.grouping.compare import MethodSettings

# The threshold sweep runs the chosen method only, or every method (the comparison).
SweepScope = Literal["chosen", "all"]
# The columns of a labelled-pairs file by default: Quora Question Pairs' names.
LABEL_ID_A, LABEL_ID_B, LABEL_FIELD = "qid1", "qid2", "is_duplicate"
# The known-duplicates field read when the embeddings kept it (the bundled sample corpus has
# it), and its old value that turned known duplicates off.
KNOWN_FIELD, NO_KNOWN_FIELD = "duplicate_of", "none"
# The stable-keep modes the manifest and the previous version record.
STABLE_MODES = {None: "auto", True: "on", False: "off"}

_INPUTS, _GROUPS, _MEASURE, _CORPUS, _SWEEP = "inputs", "groups", "measure", "corpus", "sweep"


@dataclass(frozen=True)
class Options(StageOptions):
    """Group near-duplicate rows from the similar pairs of ``sbert pairs`` and keep one row of
    each group; writes the groups, the kept and removed ids and a report. By default a row is
    removed only for a kept row it scores at least the threshold with."""

    INPUT_OPTIONS = ("pairs", "embeddings", "corpus", "against", "labels")
    # Old names and values, accepted for one version with a deprecation line.
    RENAMED: ClassVar[Mapping[str, str]] = {"rank": "keep", "label_column": "label_field"}
    OLD_VALUES: ClassVar[Mapping[str, Mapping[Any, Any]]] = {
        "keep": {"corpus": "first"},
        "stable_keep": {"auto": None, "on": True, "off": False},
        "known_duplicates_field": {
            NO_KNOWN_FIELD: Sets(known_duplicates=False, known_duplicates_field=None)
        },
    }

    pairs: str | None = option(
        help="an sbert pairs output (required unless --against with --embeddings)", group=_INPUTS
    )
    output: str | None = option(help="output directory (not with --dry-run)", group=_INPUTS)
    embeddings: tuple[str, ...] = option(
        (), "the embeddings the pairs came from, if they moved", group=_INPUTS, advanced=True
    )
    against: tuple[str, ...] = option(
        (),
        "reference embeddings: remove every row with cosine >= the threshold to a reference row",
        metavar="REF_EMBEDDINGS",
        group=_INPUTS,
    )
    threshold: float = option(
        help="least score (cosine, or verify score) of a removed row to its kept row",
        required=True,
    )
    method: Method = option(
        DEFAULT_METHOD,
        "how pairs become groups; components, mutual, average may remove rows below T",
        group=_GROUPS,
    )
    keep: str = option(
        DEFAULT_KEEP, f"the member kept: {', '.join(KEEP_CHOICES)}", metavar="POLICY",
        group=_GROUPS,
    )  # fmt: skip
    radius: float | None = option(
        help="star, split: least score to the kept row (default T; lower removes rows below T)",
        group=_GROUPS,
    )
    max_group_size: int = option(
        DEFAULT_MAX_GROUP_SIZE,
        "a larger group is split (star at T, then T + 0.01, ... inside it)",
        group=_GROUPS,
    )
    seed: int = option(0, "seed of --keep random", advanced=True)
    mutual_k: int = option(DEFAULT_MUTUAL_K, "mutual: neighbours per item", advanced=True)
    missing_score: float = option(0.0, "average: score of a pair not loaded", advanced=True)
    stable_keep: bool | None = option(
        help="keep what the previous version kept (default: when the settings are unchanged)",
        group=_GROUPS,
    )
    labels: str | None = option(
        help="labelled pairs (two ids and a 0/1 label): P/R/F1 of every sweep threshold",
        group=_MEASURE,
    )
    target_precision: float | None = option(
        help="with --labels: the threshold of highest recall with precision >= P", group=_MEASURE
    )
    label_id_a: str = option(LABEL_ID_A, "first id column of --labels", advanced=True)
    label_id_b: str = option(LABEL_ID_B, "second id column of --labels", advanced=True)
    label_field: str = option(LABEL_FIELD, "0/1 label column of --labels", advanced=True)
    skip_unknown_labels: bool = option(
        False, "leave out labelled pairs naming ids not embedded", advanced=True
    )
    known_duplicates_field: str | None = option(
        help=f"kept field naming the row a row duplicates (default: {KNOWN_FIELD} when kept)",
        metavar="FIELD",
        advanced=True,
    )
    known_duplicates: bool = option(
        True, "measure how many known duplicates end in one group", group=_MEASURE
    )
    corpus: str | None = option(
        help="glob of the corpus: its order, texts and the rows --apply writes", group=_CORPUS
    )
    apply: bool = option(False, "write the deduplicated corpus (needs --corpus)", group=_CORPUS)
    id_field: str | None = option(help="corpus id field (default: the embed job's)", advanced=True)
    text_field: str | None = option(
        help="corpus text field (default: the embed job's)", advanced=True
    )
    format: str | None = option(
        help="corpus format (default: the embed job's)", cli={"choices": FORMATS}, advanced=True
    )
    sweep_from: float = option(0.80, "lowest sweep threshold", group=_SWEEP)
    sweep_to: float = option(0.99, "highest sweep threshold", group=_SWEEP)
    sweep_step: float = option(0.01, "sweep step", advanced=True)
    sweep: SweepScope = option(
        "chosen", "chosen: the --method only; all: every method, to compare", group=_SWEEP
    )
    report_groups: int = option(50, "largest groups shown in report.html", advanced=True)
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
        at_least("max_group_size", self.max_group_size, 2)
        field = self.known_duplicates_field
        if field is not None and (not field.strip() or field in ("id", "embedding")):
            raise OptionError(
                "known_duplicates_field",
                f"must name a corpus field the embeddings kept, got {field!r}",
            )
        if self.format is not None and self.format not in FORMATS:
            raise OptionError("format", f"must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.stable_mode not in STABLE_MODES.values():
            raise OptionError(
                "stable_keep", f"must be true, false or unset; got {self.stable_keep!r}"
            )
        checked_memory_budget(self.memory_budget)
        self._check_keep()
        self._check_method_settings()
        self._check_labels()
        self._check_sweep()

    def _check_keep(self) -> None:
        keep = self.keep_policy
        if not is_keep(keep):
            raise OptionError("keep", f"must be one of {', '.join(KEEP_CHOICES)}; got {keep!r}")
        if keep.startswith("column:") and self.corpus is None:
            raise OptionError("keep", f"{keep} reads the field from the corpus: pass --corpus")

    def _check_method_settings(self) -> None:
        """The star/split radius, mutual's k and average linkage's missing score."""
        if self.radius is not None:
            if self.method not in RADIUS_METHODS:
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

    @property
    def keep_policy(self) -> str:
        """``keep`` with an old value spelled the new way."""
        return canonical_keep(self.keep)

    @property
    def stable_mode(self) -> str:
        """``auto``, ``on`` or ``off``: the stable-keep mode as manifests record it."""
        value = self.stable_keep
        if isinstance(value, str):  # an old value the options base has not converted
            return value
        return STABLE_MODES.get(value, repr(value))

    @property
    def known_field(self) -> str | None:
        """The known-duplicates field asked for; :data:`NO_KNOWN_FIELD` when they are off."""
        if not self.known_duplicates or self.known_duplicates_field == NO_KNOWN_FIELD:
            return NO_KNOWN_FIELD
        return self.known_duplicates_field

    def method_settings(self, floor: float | None) -> MethodSettings:
        """The grouping settings of this run; ``floor``: the pairs stage's threshold.

        Raises:
            ValueError: ``radius`` below the pairs' threshold (the pairs under it are not all
                known, so stars would be cut by missing pairs).
        """
        from sbert_pipeline.grouping.compare import MethodSettings

        if self.radius is not None and floor is not None and self.radius < floor:
            raise ValueError(
                f"--radius {self.radius:g} is below the pairs' threshold {floor:g} (the pairs "
                f"manifest in {self.pairs}): pairs under it are not all known; raise --radius "
                f"or rerun sbert pairs with --threshold {self.radius:g}"
            )
        gap = DEFAULT_RADIUS_GAP if self.radius is None else round(self.threshold - self.radius, 6)
        return MethodSettings(
            method=self.method,
            keep=self.keep_policy,
            radius_gap=gap,
            floor=floor,
            k=self.mutual_k,
            missing_score=self.missing_score,
            seed=self.seed,
            max_group_size=self.max_group_size,
        )


def deciding_settings(
    *,
    method: str,
    threshold: float,
    keep: str,
    radius: float | None,
    mutual_k: int,
    missing_score: float,
    seed: int,
    max_group_size: int | None = None,
) -> dict:
    """The settings that decide a run's groups and kept rows, as a manifest records them:
    method, threshold and keep rule always, the others only where the method or keep rule uses
    them. ``radius`` is the radius used (star, split). The inputs are not settings: new data
    is what a stable keep is for."""
    out: dict = {"method": method, "threshold": threshold, "keep": keep}
    if max_group_size is not None:
        out["max_group_size"] = max_group_size
    if method in RADIUS_METHODS:
        out["radius"] = radius
    if method == "mutual":
        out["mutual_k"] = mutual_k
    if method == "average":
        out["missing_score"] = missing_score
    if keep == "random":
        out["seed"] = seed
    return out


def run_deciding_settings(options: Options, settings: MethodSettings) -> dict:
    """:func:`deciding_settings` of the run ``options`` and ``settings`` describe."""
    method = options.method
    radius = settings.radius_at(options.threshold) if method in RADIUS_METHODS else None
    return deciding_settings(
        method=method,
        threshold=options.threshold,
        keep=options.keep_policy,
        radius=radius,
        mutual_k=settings.k,
        missing_score=settings.missing_score,
        seed=settings.seed,
        max_group_size=settings.max_group_size,
    )


def settings_changed(before: dict, after: dict) -> list[str]:
    """``["threshold changed 0.75 -> 0.7", ...]``: the :func:`deciding_settings` that differ.

    A setting only one side uses differs through the method or keep rule, which is named."""
    return [
        f"{key.replace('_', '-')} changed {_shown(before[key])} -> {_shown(after[key])}"
        for key in after
        if key in before and before[key] != after[key]
    ]


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
