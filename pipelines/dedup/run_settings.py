"""The dedup run's method settings from its options, checked against the sweep (Beam-free)."""

from __future__ import annotations

from pipelines.dedup.choices import DEFAULT_KEEP, DEFAULT_RADIUS_GAP
from pipelines.dedup.options import Options
from pipelines.dedup.sweep import MethodSettings


def settings_of(options: Options, floor: float | None) -> MethodSettings:
    """The method settings of ``options``; ``floor``: the pairs stage's threshold.

    Raises:
        ValueError: ``--radius`` below the pairs' threshold (the pairs under it are not all
            known, so stars would be cut by missing pairs).
    """
    if options.radius is not None and floor is not None and options.radius < floor:
        raise ValueError(
            f"--radius {options.radius:g} is below the pairs' threshold {floor:g} (the pairs "
            f"manifest in {options.pairs}): pairs under it are not all known; raise --radius or "
            f"rerun sbert pairs with --threshold {options.radius:g}"
        )
    gap = (
        DEFAULT_RADIUS_GAP
        if options.radius is None
        else round(options.threshold - options.radius, 6)
    )
    return MethodSettings(
        method=options.method,
        # The methods of the sweep other than components (which only count there).
        keep=options.keep if options.keep is not None else DEFAULT_KEEP,
        radius_gap=gap,
        floor=floor,
        k=options.mutual_k,
        missing_score=options.missing_score,
        seed=options.seed,
    )


def check_settings(settings: MethodSettings, thresholds: list[float]) -> None:
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
