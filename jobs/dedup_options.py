"""The checks of ``sbert dedup``'s options and the method settings they give (the parser is
``jobs/parsers/dedup.py``, the command :mod:`jobs.dedup`)."""

from __future__ import annotations

import argparse

from apache_beam.io.filesystems import FileSystems

from jobs.parsers.dedup import build_parser
from pipelines.dedup.choices import DEFAULT_RADIUS_GAP, DEFAULT_RANK, KEEP_AS_RANK
from pipelines.dedup.groups import sweep_thresholds
from pipelines.dedup.sweep import MethodSettings, parse_rank
from pipelines.vectors.checks import check_cosine


def check_options(argv: list[str]) -> None:
    """Check this command's option values without reading inputs or touching any output.

    ``sbert run`` calls it for every stage before running the first one.

    Raises:
        ValueError, FileNotFoundError: a value the command would refuse, naming the option.
    """
    check_args(build_parser().parse_known_args(argv)[0])


def check_args(args: argparse.Namespace) -> None:
    """Refuse option values that cannot work, naming the option (and fill ``--rank``)."""
    check_cosine(args.threshold, "--threshold")
    if args.dry_run and args.apply:
        raise ValueError("--dry-run writes nothing; leave out --apply")
    if not args.dry_run and args.output is None:
        raise ValueError("--output is required (unless --dry-run)")
    if args.apply and args.corpus is None:
        raise ValueError("--apply writes the deduplicated corpus and needs --corpus GLOB")
    if args.report_groups < 0:
        raise ValueError(f"--report-groups must be >= 0, got {args.report_groups}")
    field = args.known_duplicates_field
    if field is not None and (not field.strip() or field in ("id", "embedding")):
        raise ValueError(
            f"--known-duplicates-field must name a corpus field the embeddings kept, got {field!r}"
        )
    if args.method == "components" and args.rank is not None:
        raise ValueError(
            "--rank chooses the kept member for the other methods; components uses --keep"
        )
    if args.method != "components" and args.keep is not None:
        if args.rank is not None:
            raise ValueError(
                f"--keep chooses the kept member of components; --method {args.method} keeps "
                "the best-ranked member by --rank: give one of them"
            )
        # Read as the ranking that means the same (so configs written for components run).
        args.rank, args.keep = KEEP_AS_RANK[args.keep], None
    args.rank = parse_rank(args.rank if args.rank is not None else DEFAULT_RANK)
    if args.rank.startswith("column:") and args.corpus is None:
        raise ValueError(f"--rank {args.rank} reads the field from the corpus: pass --corpus")
    if args.radius is not None:
        if args.method not in ("star", "split"):
            raise ValueError(f"--radius is for --method star or split, not {args.method}")
        check_cosine(args.radius, "--radius")
        if args.radius > args.threshold:
            raise ValueError(
                f"--radius must not exceed --threshold {args.threshold:g}; got {args.radius}"
            )
    if args.mutual_k < 1:
        raise ValueError(f"--mutual-k must be >= 1, got {args.mutual_k}")
    check_cosine(args.missing_score, "--missing-score")
    if args.labels is not None and not FileSystems.exists(args.labels):
        raise FileNotFoundError(f"--labels {args.labels}: no such file")
    if args.target_precision is not None:
        if args.labels is None:
            raise ValueError("--target-precision is measured on labelled pairs: pass --labels")
        if not 0.0 <= args.target_precision <= 1.0:  # written so that NaN is refused
            raise ValueError(f"--target-precision must lie in [0, 1]; got {args.target_precision}")
    sweep_thresholds(args.sweep_from, args.sweep_to, args.sweep_step)


def settings_of(args: argparse.Namespace, floor: float | None) -> MethodSettings:
    """The method settings of checked options; ``floor``: the pairs stage's threshold.

    Raises:
        ValueError: ``--radius`` below the pairs' threshold (the pairs under it are not all
            known, so stars would be cut by missing pairs).
    """
    if args.radius is not None and floor is not None and args.radius < floor:
        raise ValueError(
            f"--radius {args.radius:g} is below the pairs' threshold {floor:g} (the pairs "
            f"manifest in {args.pairs}): pairs under it are not all known; raise --radius or "
            f"rerun sbert pairs with --threshold {args.radius:g}"
        )
    gap = DEFAULT_RADIUS_GAP if args.radius is None else round(args.threshold - args.radius, 6)
    return MethodSettings(
        method=args.method,
        rank=args.rank,
        radius_gap=gap,
        floor=floor,
        k=args.mutual_k,
        missing_score=args.missing_score,
        seed=args.seed,
    )


def check_settings(
    args: argparse.Namespace, settings: MethodSettings, thresholds: list[float]
) -> None:
    """Refuse settings the sweep cannot run with.

    Raises:
        ValueError: ``--missing-score`` above the lowest sweep threshold (average linkage
            would merge clusters that share no pair).
    """
    if settings.missing_score > min(thresholds):
        raise ValueError(
            f"--missing-score {settings.missing_score:g} is above the lowest sweep threshold "
            f"{min(thresholds):g}: average linkage would merge clusters that share no pair"
        )
