"""Retrieve, then verify, on held-out Quora duplicates: dedup F1 with and without a cross-encoder.

The held-out part is the one ``examples/cross_encoder_qqp.yaml`` (and ``finetune_qqp.yaml``)
keep out of training: QQP dev split by connected components of the labelled-pair graph,
holdout fraction 0.08, seed 42, so no held-out question or duplicate group was trained on. On
it, the benchmark runs the commands a user runs, as subprocesses:

    sbert embed  --input corpus.jsonl --format jsonl --id-field id --text-field text --keep-text
    sbert pairs  --embeddings emb --threshold 0.7 --method exact
    sbert verify --pairs pairs --model CROSS_ENCODER [--band LOW HIGH]
    sbert dedup  --pairs pairs|verified --labels labels.tsv --sweep-from ... --sweep all

and reads each method's best pair-F1 under a largest-group cap of ``--max-largest`` (a sweep
point whose largest group is over it does not count) and, beside it, the uncapped best, each
with its largest group and share of questions removed, from the two dedup manifests (dedup runs
with no group-size limit of its own here, so the sweep shows each method's groups unsplit). It
also reports, for cosine band edges, how many candidate pairs lie above the edge and which
share of the labelled duplicates they keep (the recall the bi-encoder leaves to the verifier),
and verify's wall time and pairs/s.

    python -m benchmarks.verify_qqp --model runs/minilm-qqp-cross-encoder [--work DIR]
        [--threshold 0.7] [--band LOW HIGH] [--compute-dtype float32] [--cpu-backend torch]
        [--max-largest 1000] [--reuse] [--name verify_qqp]

``--reuse`` keeps the work folder's embeddings and pairs (for trials of the band or the
model). The last line is the best verified F1 (largest group <= --max-largest) over the best
F1 without verify. Results: ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA_DIR, write_result
from benchmarks.parser import benchmark_parser

QQP = DATA_DIR / "qqp"
# The split of examples/cross_encoder_qqp.yaml: the same holdout the model never saw.
HOLDOUT_FRACTION = 0.08
SPLIT_SEED = 42
REPORTED_METHODS = ("star", "components", "mutual")
BAND_EDGES = (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)


def holdout_files(work: Path) -> tuple[Path, Path, int, int]:
    """Write the holdout's questions (JSONL: id, text) and labelled pairs (TSV); return the
    paths with the question and labelled-pair counts."""
    from sbert_pipeline.finetune.holdout_grouping import DedupTestConfig, load_holdout
    from sbert_pipeline.io.text_normal import text_key

    from sbert_core.training.data import DataSpec

    spec = DataSpec(
        path=str(QQP / "dev_pairs.tsv.gz"),
        kind="duplicate_pairs",
        columns={
            "id1": "qid1",
            "id2": "qid2",
            "sentence1": "question1",
            "sentence2": "question2",
            "label": "is_duplicate",
        },
        part="holdout",
        holdout_fraction=HOLDOUT_FRACTION,
        split_seed=SPLIT_SEED,
    )
    config = DedupTestConfig(
        pairs=spec,
        questions=str(QQP / "dev_questions.tsv.gz"),
        question_columns={"id": "qid", "text": "question"},
    )
    holdout = load_holdout(config, text_key)
    corpus = work / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for qid, text in zip(holdout.ids, holdout.texts, strict=True):
            handle.write(json.dumps({"id": qid, "text": text}, ensure_ascii=False) + "\n")
    labels = work / "labels.tsv"
    labelled = holdout.labelled
    with labels.open("w", encoding="utf-8") as handle:
        handle.write("qid1\tqid2\tis_duplicate\n")
        for a, b, label in zip(labelled.a, labelled.b, labelled.label, strict=True):
            handle.write(f"{holdout.ids[a]}\t{holdout.ids[b]}\t{int(label)}\n")
    return corpus, labels, len(holdout.ids), len(labelled.a)


def sbert(*args: str) -> float:
    """Run ``sbert ARGS`` (this interpreter's), fail loudly, return the wall seconds."""
    command = [sys.executable, "-m", "sbert_pipeline.jobs.cli", *args]
    print("$ sbert " + " ".join(args), flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sbert {args[0]} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    print(f"  {seconds:.1f} s: {done.stdout.strip().splitlines()[-1] if done.stdout else ''}")
    return seconds


def complete(folder: Path, **recorded: float) -> bool:
    """Whether ``folder`` holds a published output whose manifest records these values."""
    manifest = folder / "_manifest.json"
    if not manifest.is_file():
        return False
    values = json.loads(manifest.read_text(encoding="utf-8"))
    return all(values.get(key) == value for key, value in recorded.items())


def best_points(manifest: dict, max_largest: int, questions: int) -> dict:
    """Per method: the best-F1 point of the sweep, and the best one whose largest group is at
    most ``max_largest``, each with the share of the ``questions`` it removes."""
    out = {}
    for sweep in manifest["methods"]:
        points = [p for p in sweep["points"] if p.get("f1") is not None]
        if not points:
            continue
        limited = [p for p in points if p["largest"] <= max_largest]
        out[sweep["method"]] = {
            "best": _best(points, questions),
            "best_within_limit": _best(limited, questions) if limited else None,
        }
    return out


def _best(points: list[dict], questions: int) -> dict:
    """The best-F1 point of ``points``, with the share of the questions it removes."""
    top = max(points, key=lambda p: p["f1"])
    keys = ("threshold", "precision", "recall", "f1", "largest", "removed")
    return {**{k: top[k] for k in keys}, "removed_share": top["removed"] / questions}


def band_recall(embeddings: Path, labels: Path, edges: tuple[float, ...]) -> list[dict]:
    """For each cosine edge: candidate pairs at or above it, and the share of the labelled
    duplicates whose cosine is at or above it."""
    import pyarrow.parquet as pq
    from sbert_pipeline.io.embeddings import embedding_matrix, shard_paths
    from sbert_pipeline.vectors.pairs_above import self_pairs_above

    table = pq.read_table(shard_paths(str(embeddings)), columns=["id", "embedding"])
    ids = table.column("id").to_pylist()
    vectors = embedding_matrix(table.column("embedding")).astype(np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    row = {qid: i for i, qid in enumerate(ids)}
    lines = labels.read_text(encoding="utf-8").splitlines()[1:]
    duplicates = [line.split("\t")[:2] for line in lines if line.endswith("\t1")]
    a = np.array([row[x] for x, _ in duplicates])
    b = np.array([row[y] for _, y in duplicates])
    dup_cosine = np.einsum("ij,ij->i", vectors[a], vectors[b])
    _, _, scores = self_pairs_above(vectors, min(edges))
    return [
        {
            "edge": edge,
            "candidate_pairs": int(np.count_nonzero(scores >= edge)),
            "labelled_duplicates_kept": round(float(np.mean(dup_cosine >= edge)), 4),
        }
        for edge in edges
    ]


def main(argv: list[str] | None = None) -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", required=True, help="cross-encoder folder")
    parser.add_argument("--work", default=None, help="work folder (default: a temp folder)")
    parser.add_argument("--threshold", type=float, default=0.7, help="pairs threshold")
    parser.add_argument("--band", type=float, nargs=2, default=None, metavar=("LOW", "HIGH"))
    parser.add_argument("--compute-dtype", default="float32")
    parser.add_argument("--cpu-backend", default="torch")
    parser.add_argument("--max-largest", type=int, default=1000)
    parser.add_argument("--name", default="verify_qqp", help="results file name (no .json)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the work folder's embeddings and pairs when they are complete (band trials)",
    )
    args = parser.parse_args(argv)

    work = Path(args.work or tempfile.mkdtemp(prefix="verify_qqp_"))
    work.mkdir(parents=True, exist_ok=True)
    corpus, labels, questions, labelled = holdout_files(work)
    print(f"holdout: {questions:,} questions, {labelled:,} labelled pairs in {work}")
    emb, pairs, verified = work / "emb", work / "pairs", work / "verified"
    seconds: dict[str, float] = {}
    if not (args.reuse and complete(emb)):
        seconds["embed"] = sbert(
            "embed",
            "--input",
            str(corpus),
            "--output",
            str(emb),
            "--format",
            "jsonl",
            "--id-field",
            "id",
            "--text-field",
            "text",
            "--keep-text",
            "--overwrite",
        )
    if not (args.reuse and complete(pairs, threshold=args.threshold)):
        seconds["pairs"] = sbert(
            "pairs",
            "--embeddings",
            str(emb),
            "--output",
            str(pairs),
            "--method",
            "exact",
            "--threshold",
            str(args.threshold),
            "--overwrite",
        )
    band = ["--band", *map(str, args.band)] if args.band else []
    seconds["verify"] = sbert(
        "verify",
        "--pairs",
        str(pairs),
        "--model",
        args.model,
        "--output",
        str(verified),
        "--compute-dtype",
        args.compute_dtype,
        "--cpu-backend",
        args.cpu_backend,
        *band,
        "--overwrite",
    )
    verify_manifest = json.loads((verified / "_manifest.json").read_text(encoding="utf-8"))
    results = {}
    for name, folder, sweep_from, threshold in (
        ("cosine", pairs, args.threshold, 0.85),
        ("verified", verified, 0.05, 0.5),
    ):
        out = work / f"dedup_{name}"
        seconds[f"dedup_{name}"] = sbert(
            "dedup",
            "--pairs",
            str(folder),
            "--output",
            str(out),
            "--threshold",
            str(threshold),
            "--labels",
            str(labels),
            "--sweep-from",
            str(sweep_from),
            "--sweep-to",
            "0.99",
            "--sweep-step",
            "0.01",
            "--sweep",
            "all",
            "--max-group-size",
            str(10**9),  # no limit: the cap below is the benchmark's
            "--overwrite",
        )
        manifest = json.loads((out / "_manifest.json").read_text(encoding="utf-8"))
        results[name] = best_points(manifest, args.max_largest, questions)
    bands = band_recall(emb, labels, BAND_EDGES)

    print(
        f"\n{'method':<12} {'scores':<9} capped (largest <= {args.max_largest:,}): "
        f"{'T':>5} {'P':>7} {'R':>7} {'F1':>7} {'largest':>8} {'removed':>7} | uncapped: "
        f"{'T':>5} {'F1':>7} {'largest':>8} {'removed':>7}"
    )
    for method in results["cosine"]:
        for name in ("cosine", "verified"):
            found = results[name].get(method, {})
            point, free = found.get("best_within_limit"), found.get("best")
            if not free:
                continue
            capped = (
                f"{point['threshold']:>5.2f} {point['precision']:>7.4f} {point['recall']:>7.4f} "
                f"{point['f1']:>7.4f} {point['largest']:>8,} {point['removed_share']:>7.1%}"
                if point
                else f"{'-':>5} {'-':>7} {'-':>7} {'-':>7} {'-':>8} {'-':>7}"
            )
            print(
                f"{method:<12} {name:<9} {' ' * 29}{capped} | {' ' * 10}{free['threshold']:>5.2f} "
                f"{free['f1']:>7.4f} {free['largest']:>8,} {free['removed_share']:>7.1%}"
            )
    print("\ncosine edge  candidate pairs  labelled duplicates kept")
    for band_row in bands:
        print(
            f"{band_row['edge']:>11.2f}  {band_row['candidate_pairs']:>15,}  "
            f"{band_row['labelled_duplicates_kept']:>24.4f}"
        )
    section = verify_manifest["verify"]
    print(
        f"\nverify: {section['counts']['scored']:,} of {section['counts']['read']:,} pairs scored, "
        f"{section['pairs_per_second']:g} pairs/s in the stage ({section['seconds']:.1f} s; "
        f"{seconds['verify']:.1f} s wall with start-up)"
    )

    def best_of(name: str) -> dict:
        points = [
            dict(p["best_within_limit"], method=m)
            for m, p in results[name].items()
            if m in REPORTED_METHODS and p["best_within_limit"]
        ]
        return max(points, key=lambda p: p["f1"])

    before, after = best_of("cosine"), best_of("verified")
    peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    write_result(
        args.name,
        {
            "model": args.model,
            "split": {"holdout_fraction": HOLDOUT_FRACTION, "split_seed": SPLIT_SEED},
            "questions": questions,
            "labelled_pairs": labelled,
            "pairs_threshold": args.threshold,
            "band": args.band,
            "compute_dtype": args.compute_dtype,
            "cpu_backend": args.cpu_backend,
            "max_largest": args.max_largest,
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "peak_child_rss_mib": round(peak_rss),
            "verify": {
                k: section.get(k)
                for k in ("band", "counts", "movement", "seconds", "pairs_per_second", "compute")
            },
            "methods": results,
            "band_edges": bands,
            "best_without_verify": before,
            "best_with_verify": after,
        },
    )
    print(
        f"best F1 (largest group <= {args.max_largest:,}): verified {after['f1']:.4f} "
        f"({after['method']}) vs cosine {before['f1']:.4f} ({before['method']}): "
        f"x{after['f1'] / before['f1']:.3f}"
    )


if __name__ == "__main__":
    main()
