"""Daily new data: an incremental ``sbert run`` against a from-scratch run on the union.

A corpus of ``--files`` files of ``--rows-per-file`` texts (English glosses from
``../shared/data/corpus``) goes through ``sbert run`` (embed, index, cluster, pairs exact,
dedup) with ``incremental: true``: day one. Then one new file of ``--new-rows`` texts arrives
(1% by default) and the same command runs again: day two, incremental. A second job folder runs
the union from scratch (``incremental: false``): the competitor, on the same data, threads and
machine, in the same run of this script.

    python -m benchmarks.incremental_run [--files 20] [--rows-per-file 10000]
        [--new-rows 2000] [--threads 2] [--work DIR] [--name incremental_run]
        [--day-one-only | --continue]

Day one is not part of the ratio, so it may run apart: ``--day-one-only`` stops after it (its
measurements kept in ``WORK/day1.json``), and ``--continue`` on the same folder runs day two and
the union from scratch, e.g. when the machine is quiet.

Checked, not only timed:
- the incremental pairs equal ``sbert pairs --method exact`` run from scratch on the same
  (incremental) embeddings bit for bit: pairs, scores, top-k lists;
- against the union embedded from scratch, whose vectors differ in the last bits (each text is
  batched with other texts), the pairs and lists agree up to neighbours whose scores lie within
  1e-5 of each other or of the threshold (counted apart), and the dedup groups are the same
  partition (dedup runs with ``stable_keep: false`` in both jobs, so the keep rule decides
  alone). Each job's per-stage seconds come from its ``_job_state.json``; each stage's
``incremental`` manifest section says what it reused.

The last line is the incremental run's wall time as a share of the from-scratch run's (goal:
5% or less). Results: ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks.common import DATA_DIR, read_tsv, write_result
from benchmarks.pairs_job import run_command
from benchmarks.parser import benchmark_parser

STAGES = ("embed", "index", "cluster", "pairs", "dedup")
PAIRS_THRESHOLD = 0.8
DEDUP_THRESHOLD = 0.9
SCORE_TOLERANCE = 1e-5


def corpus_texts(n: int) -> list[str]:
    """The first ``n`` texts of the shared English corpus (distinct, stripped, non-empty)."""
    rows = read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")
    if len(rows) < n:
        raise SystemExit(f"the corpus has {len(rows)} texts, fewer than the {n} asked for")
    return [row["text"] for row in rows[:n]]


def write_file(path: Path, texts: list[str], first_id: int) -> None:
    """One JSONL corpus file: ``{"id": "t<row>", "text": ...}`` per line."""
    with path.open("w", encoding="utf-8") as out:
        for offset, text in enumerate(texts):
            out.write(json.dumps({"id": f"t{first_id + offset}", "text": text}) + "\n")


def job_config(job_dir: Path, corpus: Path, *, incremental: bool) -> dict:
    """The job both folders run: the same stages and settings, incremental or not."""
    return {
        "job_dir": str(job_dir),
        "input": {"path": str(corpus / "*.jsonl"), "id_field": "id", "keep_text": True},
        "model": "all-MiniLM-L6-v2",
        "runner": "local",
        "incremental": incremental,
        "stages": list(STAGES),
        # The index budget is the default (auto: most of the free memory), as a user runs it.
        "cluster": {"method": "kmeans", "k": 100},
        "pairs": {"k": 10, "threshold": PAIRS_THRESHOLD, "method": "exact"},
        "dedup": {"threshold": DEDUP_THRESHOLD, "stable_keep": False},
    }


def run_job(config: dict, path: Path, threads: int, log: Path) -> dict:
    """``sbert run`` on ``config`` (written to ``path``): wall time, RSS, per-stage seconds."""
    path.write_text(json.dumps(config))
    measured = run_command(
        [str(Path(shutil.which("sbert") or "sbert")), "run", str(path)], threads, 7200, log
    )
    if measured["returncode"] != 0:
        raise SystemExit(f"sbert run failed ({measured['returncode']}); see {log}")
    state = json.loads((Path(config["job_dir"]) / "_job_state.json").read_text())
    measured["stage_seconds"] = {
        name: record["seconds"] for name, record in state["stages"].items() if name in STAGES
    }
    return measured


def incremental_sections(job_dir: Path) -> dict:
    """Each stage's ``incremental`` manifest section (what it reused), by stage."""
    from sbert_pipeline.jobs.run_table import stage_spec

    sections = {}
    for stage in STAGES:
        folder = job_dir / stage_spec(stage).folder
        manifest = json.loads((folder / "_manifest.json").read_text())
        sections[stage] = manifest.get("incremental")
    return sections


def _read_folder(folder: Path, columns: list[str]) -> dict[str, list]:
    """The columns of every part the folder's manifest lists (checked against their digests),
    concatenated."""
    from sbert_pipeline.io.output_dir import listed_parts, read_manifest

    directory = str(folder.parent)
    names = listed_parts(directory, read_manifest(directory), folder.name) or []
    tables = [pq.read_table(name, columns=columns) for name in names]
    return {column: [v for t in tables for v in t.column(column).to_pylist()] for column in columns}


def _pairs_folder(folder: Path) -> tuple[dict, dict]:
    """``({(id_a, id_b): score}, {id: (neighbor_ids, scores)})`` of a pairs/ folder."""
    pairs = _read_folder(folder / "pairs", ["id_a", "id_b", "score"])
    lists = _read_folder(folder / "neighbors", ["id", "neighbor_ids", "scores"])
    return (
        dict(zip(zip(pairs["id_a"], pairs["id_b"], strict=True), pairs["score"], strict=True)),
        {
            row: (ids, scores)
            for row, ids, scores in zip(
                lists["id"], lists["neighbor_ids"], lists["scores"], strict=True
            )
        },
    )


def _same_list_but_near_ties(found: tuple, expected: tuple, tolerance: float) -> bool:
    """Whether two top-k lists agree once neighbours whose scores lie within ``tolerance`` of
    each other may trade places (and the last place with the first one left out)."""
    (ids_f, scores_f), (ids_e, scores_e) = found, expected
    if len(ids_f) != len(ids_e):
        return False
    if any(abs(a - b) > tolerance for a, b in zip(scores_f, scores_e, strict=True)):
        return False
    differing = [i for i, (a, b) in enumerate(zip(ids_f, ids_e, strict=True)) if a != b]
    return all(
        any(
            abs(scores_e[i] - scores_e[j]) <= 2 * tolerance
            for j in range(len(ids_e))
            if j != i and ids_e[j] == ids_f[i]
        )
        or (i == len(ids_e) - 1 or abs(scores_e[i] - scores_e[-1]) <= 2 * tolerance)
        for i in differing
    )


def compare_pairs(found: Path, expected: Path, tolerance: float = 0.0) -> dict:
    """Pair sets, scores and top-k lists of two pairs/ folders.

    With ``tolerance`` 0 everything must be equal bit for bit (the same vectors searched two
    ways). With a tolerance (the union embedded again from scratch, whose vectors differ in the
    last bits: the texts were batched with other texts), pairs within it of the threshold and
    lists that differ only among neighbours whose scores lie within it are counted apart.
    """
    pairs_f, lists_f = _pairs_folder(found)
    pairs_e, lists_e = _pairs_folder(expected)
    common = pairs_f.keys() & pairs_e.keys()
    only = (pairs_f.keys() - pairs_e.keys()) | (pairs_e.keys() - pairs_f.keys())
    near = {
        key
        for key in only
        if abs(pairs_f.get(key, pairs_e.get(key)) - PAIRS_THRESHOLD) <= tolerance
    }
    # A list differs when its neighbours (ids, in order) do; scores are compared apart.
    differing = [key for key, value in lists_e.items() if lists_f.get(key, (None,))[0] != value[0]]
    list_scores = [
        max((abs(a - b) for a, b in zip(lists_f[key][1], value[1], strict=True)), default=0.0)
        for key, value in lists_e.items()
        if key in lists_f and len(lists_f[key][1]) == len(value[1])
    ]
    ties = [
        key
        for key in differing
        if key in lists_f
        and tolerance
        and _same_list_but_near_ties(lists_f[key], lists_e[key], tolerance)
    ]
    return {
        "tolerance": tolerance,
        "pairs_found": len(pairs_f),
        "pairs_expected": len(pairs_e),
        "pairs_differing": len(only) - len(near),
        "pairs_differing_within_tolerance_of_threshold": len(near),
        "max_score_difference": float(
            max((abs(pairs_f[key] - pairs_e[key]) for key in common), default=0.0)
        ),
        "lists": len(lists_e),
        "max_list_score_difference": float(max(list_scores, default=0.0)),
        "lists_differing": len(differing) - len(ties) + len(lists_f.keys() - lists_e.keys()),
        "lists_differing_only_at_near_ties": len(ties),
    }


def exact_pairs_check(work: Path, threads: int) -> dict:
    """The incremental pairs against ``sbert pairs`` run from scratch on the same (incremental)
    embeddings: equal bit for bit, or the incremental search is not exact."""
    check = work / "pairs_check"
    command = [
        str(Path(shutil.which("sbert") or "sbert")),
        "pairs",
        "--embeddings",
        str(work / "job" / "embeddings"),
        "--output",
        str(check),
        "--k",
        "10",
        "--threshold",
        str(PAIRS_THRESHOLD),
        "--method",
        "exact",
    ]
    measured = run_command(command, threads, 7200, work / "pairs_check.log")
    if measured["returncode"] != 0:
        raise SystemExit(f"sbert pairs failed; see {work / 'pairs_check.log'}")
    return compare_pairs(work / "job" / "pairs", check)


def compare_groups(incremental: Path, scratch: Path) -> dict:
    """Whether two dedup folders group the same rows together and remove the same rows."""
    partitions = []
    for folder in (incremental, scratch):
        table = pq.read_table(folder / "groups.parquet", columns=["id", "group"])
        groups: dict = {}
        for row_id, group in zip(
            table.column("id").to_pylist(), table.column("group").to_pylist(), strict=True
        ):
            groups.setdefault(group, set()).add(row_id)
        removed = set((folder / "removed_ids.txt").read_text(encoding="utf-8").split("\n")) - {""}
        partitions.append(({frozenset(members) for members in groups.values()}, removed))
    (groups_i, removed_i), (groups_s, removed_s) = partitions
    return {
        "groups_incremental": len(groups_i),
        "groups_scratch": len(groups_s),
        "same_groups": groups_i == groups_s,
        "removed_incremental": len(removed_i),
        "removed_scratch": len(removed_s),
        "same_removed": removed_i == removed_s,
    }


def _day_one(work: Path, corpus: Path, texts: list[str], config: dict, args) -> dict:
    """Write the day-one files and run the job on them from scratch; keep its measurements."""
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"{work} is not empty; give an empty or new --work folder")
    corpus.mkdir(parents=True)
    for index in range(args.files):
        start = index * args.rows_per_file
        write_file(
            corpus / f"day1-{index:03d}.jsonl", texts[start : start + args.rows_per_file], start
        )
    first = run_job(config, work / "job.yaml", args.threads, work / "day1.log")
    settings = {"files": args.files, "rows_per_file": args.rows_per_file}
    (work / "day1.json").write_text(json.dumps({"settings": settings, "measured": first}))
    print(f"day one: {len(texts) - args.new_rows} rows from scratch in {first['seconds']:.1f}s")
    return first


def _finished_day_one(work: Path, args) -> dict:
    """The measurements of a ``--day-one-only`` run in ``work``, checked against the settings."""
    record = work / "day1.json"
    if not record.is_file():
        raise SystemExit(f"{record} is missing: run --day-one-only --work {work} first")
    day1 = json.loads(record.read_text())
    settings = {"files": args.files, "rows_per_file": args.rows_per_file}
    if day1["settings"] != settings:
        raise SystemExit(f"day one ran with {day1['settings']}, not {settings}")
    if (work / "scratch").exists() or (work / "corpus" / "day2-new.jsonl").exists():
        raise SystemExit(f"{work} already has day two; start again with a new --work folder")
    return day1["measured"]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows-per-file", type=int, default=10_000)
    parser.add_argument("--new-rows", type=int, default=2_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: a temp)")
    parser.add_argument("--name", default="incremental_run")
    phase = parser.add_mutually_exclusive_group()
    phase.add_argument("--day-one-only", action="store_true", help="stop after day one")
    phase.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="day two and the union from scratch, after a --day-one-only run in --work",
    )
    args = parser.parse_args()
    if args.resume and args.work is None:
        raise SystemExit("--continue needs the --work folder of the --day-one-only run")
    work = args.work or Path(tempfile.mkdtemp(prefix="sbert-incremental-"))
    corpus = work / "corpus"
    texts = corpus_texts(args.files * args.rows_per_file + args.new_rows)
    new_start = args.files * args.rows_per_file
    day_one = job_config(work / "job", corpus, incremental=True)
    if args.resume:
        first = _finished_day_one(work, args)
    else:
        first = _day_one(work, corpus, texts, day_one, args)
        if args.day_one_only:
            print(f"day one kept in {work}; run again with --continue --work {work}")
            return

    write_file(corpus / "day2-new.jsonl", texts[new_start:], new_start)
    second = run_job(day_one, work / "job.yaml", args.threads, work / "day2.log")
    print(f"day two: +{args.new_rows} rows, incremental, in {second['seconds']:.1f}s")

    scratch = job_config(work / "scratch", corpus, incremental=False)
    full = run_job(scratch, work / "scratch.yaml", args.threads, work / "scratch.log")
    print(f"union from scratch: {len(texts)} rows in {full['seconds']:.1f}s")

    exact = exact_pairs_check(work, args.threads)
    pairs = compare_pairs(work / "job" / "pairs", work / "scratch" / "pairs", SCORE_TOLERANCE)
    groups = compare_groups(work / "job" / "dedup", work / "scratch" / "dedup")
    share = second["seconds"] / full["seconds"]
    result = {
        "rows_day_one": len(texts) - args.new_rows,
        "files_day_one": args.files,
        "rows_new": args.new_rows,
        "threads": args.threads,
        "pairs_threshold": PAIRS_THRESHOLD,
        "dedup_threshold": DEDUP_THRESHOLD,
        "day_one": first,
        "incremental": second,
        "from_scratch": full,
        "incremental_sections": incremental_sections(work / "job"),
        "pairs_compared": pairs,
        "groups_compared": groups,
        "share_of_scratch": share,
        "goal_share": 0.05,
        "pairs_vs_sbert_pairs_on_the_same_vectors": exact,
        "identical": exact["pairs_differing"] == exact["lists_differing"] == 0
        and exact["max_score_difference"] == exact["max_list_score_difference"] == 0.0
        and pairs["pairs_differing"] == pairs["lists_differing"] == 0
        and groups["same_groups"]
        and groups["same_removed"],
    }
    print(json.dumps({"exact": exact, "pairs": pairs, "groups": groups}, indent=1))
    write_result(args.name, result)
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in second["stage_seconds"].items())
    print(f"incremental stages: {stages}")
    print(
        f"incremental run / from-scratch run on the union: {share:.1%} "
        f"({second['seconds']:.1f}s / {full['seconds']:.1f}s; identical: {result['identical']})"
    )


if __name__ == "__main__":
    main()
