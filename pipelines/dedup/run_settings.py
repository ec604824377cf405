"""The dedup run's method settings from its options, checked against the sweep, and the
settings that decide its groups (``--stable-keep auto`` compares them with the previous
version's; Beam-free)."""

from __future__ import annotations

from sbert_pipeline.dedup.choices import DEFAULT_KEEP, DEFAULT_RADIUS_GAP
from sbert_pipeline.dedup.options import Options
from sbert_pipeline.dedup.sweep import MethodSettings

# The methods that cut groups at a radius (the others ignore it).
RADIUS_METHODS = ("star", "split")


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


def deciding_settings(
    *,
    method: str,
    threshold: float,
    keep: str,
    radius: float | None,
    mutual_k: int,
    missing_score: float,
    seed: int,
) -> dict:
    """The settings that decide a run's groups and kept rows, as a manifest records them:
    method, threshold and keep rule always, the others only where the method or keep rule uses
    them (a star run's ``mutual_k`` decides nothing). ``radius`` is the radius used (star,
    split). The inputs are not settings: new data is what a stable keep is for."""
    out: dict = {"method": method, "threshold": threshold, "keep": keep}
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
        keep=options.keep_for(method),
        radius=radius,
        mutual_k=settings.k,
        missing_score=settings.missing_score,
        seed=settings.seed,
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
