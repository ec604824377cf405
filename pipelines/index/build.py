"""Building a FAISS index from a stream of vectors: train on a sample, add in batches, tune.

Beam-free; ``pipelines/index/sharded.py`` runs the same steps shard by shard in Beam workers.

1. One pass picks the training sample and the held-out queries (random corpus rows; the
   queries are kept out of the training sample whenever the corpus is large enough).
2. The empty index is trained on the sample (on the GPU when FAISS sees one).
3. A second pass adds every other row in batches and, on the same batches, computes the
   queries' exact neighbours (the ``IndexFlat`` answer, kept in a running top-k heap).
4. The search parameter (``nprobe`` for IVF, ``efSearch`` for HNSW) is set to the smallest
   value whose recall@10 reaches the target, and queries/s is measured at that value.
5. The held-out rows are added last, so the index holds the whole corpus.

The queries are truly held out while recall is measured: a query that is itself in an HNSW
graph walks straight to its own node and its links, which on planted data read recall 0.95
where fresh queries got 0.86. Index positions are therefore the corpus rows in order with the
held-out rows moved to the end (see :func:`index_order`); ``ids.parquet`` records them.

``metric="ip"`` L2-normalises every vector (inner product of unit vectors = cosine);
``metric="l2"`` indexes the vectors as they are (FAISS reports squared distances).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import faiss
import numpy as np
from sbert_pipeline.index.faiss_ops import (
    default_train_sample,
    min_train_points,
    new_index,
    prepare_vectors,
)
from sbert_pipeline.index.list_reserve import reserve_inverted_lists
from sbert_pipeline.index.planner import POINTS_PER_CENTROID
from sbert_pipeline.index.tuning import (
    RECALL_K,
    SearchTuning,
    queries_per_second,
    tune_search_parameter,
)
from sbert_pipeline.io.resources import release_free_memory
from sbert_pipeline.vectors.checks import require_finite
from sbert_pipeline.vectors.exact_truth import ExactTopK, Metric
from sbert_pipeline.vectors.progress import stage_progress

logger = logging.getLogger(__name__)


class VectorSource(Protocol):
    """Vectors that can be read more than once, in the same order, in bounded batches.

    ``sbert_pipeline.io.embeddings.EmbeddingsDataset`` is one; :class:`ArraySource` wraps arrays.
    """

    @property
    def dim(self) -> int: ...

    @property
    def count(self) -> int: ...

    def batches(self, batch_size: int) -> Iterator[tuple[list[str], np.ndarray]]: ...


@dataclass(frozen=True)
class ArraySource:
    """An in-memory ``(N, d)`` array as a :class:`VectorSource`; ids default to positions."""

    vectors: np.ndarray
    ids: Sequence[str] | None = None

    @property
    def dim(self) -> int:
        """Vector dimension."""
        return int(self.vectors.shape[1])

    @property
    def count(self) -> int:
        """Number of vectors."""
        return int(self.vectors.shape[0])

    def batches(self, batch_size: int = 65536) -> Iterator[tuple[list[str], np.ndarray]]:
        """``(ids, vectors)`` slices of at most ``batch_size`` rows.

        Raises:
            NonFiniteEmbeddingError: a row holds NaN or infinite values, naming its id.
        """
        for start in range(0, self.count, batch_size):
            stop = min(start + batch_size, self.count)
            ids = (
                list(self.ids[start:stop])
                if self.ids is not None
                else [str(i) for i in range(start, stop)]
            )
            require_finite(self.vectors[start:stop], ids)
            yield ids, self.vectors[start:stop]


@dataclass(frozen=True)
class BuildSettings:
    """How to build and tune one index.

    Attributes:
        factory: a FAISS ``index_factory`` string (``sbert_pipeline.index.planner`` picks one).
        metric: ``ip`` (cosine on normalised vectors) or ``l2``.
        target_recall: recall@10 the search parameter is tuned to reach.
        train_sample: training vectors; None picks :func:`default_train_sample`.
        n_queries: held-out rows for tuning and the recall estimate (at most N/10); with 1000
            the estimate was within 0.005 of checks on fresh queries in our planted tests.
        batch_size: vectors read and added per step (bounds memory while adding).
        seed: for the choice of training and query rows.
        use_gpu: train and add on GPU 0; None means "when FAISS sees a GPU".
    """

    factory: str
    metric: Metric = "ip"
    target_recall: float = 0.95
    train_sample: int | None = None
    n_queries: int = 1000
    batch_size: int = 16384
    seed: int = 0
    use_gpu: bool | None = None

    def gpu(self) -> bool:
        """Whether to use the GPU for training and adding."""
        return faiss.get_num_gpus() > 0 if self.use_gpu is None else self.use_gpu


@dataclass
class TrainedIndex:
    """A trained, still empty index plus the held-out queries it will be tuned on."""

    index: faiss.Index
    queries: np.ndarray  # (nq, d) float32, prepared for the metric
    held_out: np.ndarray  # (nq,) int64 corpus rows of the queries, sorted; indexed last
    train_sample: int
    device: str
    seconds: float


@dataclass
class BuiltIndex:
    """A filled, tuned index and what was measured on it."""

    index: faiss.Index
    factory: str
    metric: Metric
    tuning: SearchTuning
    queries_per_s: float
    n_queries: int
    train_sample: int
    device: str
    held_out: np.ndarray  # corpus rows of the queries, which the index holds last
    seconds: dict[str, float] = field(default_factory=dict)

    def corpus_rows(self, positions: np.ndarray) -> np.ndarray:
        """Corpus rows of index positions (-1 stays -1)."""
        order = index_order(int(self.index.ntotal), self.held_out)
        positions = np.asarray(positions)
        return np.where(positions >= 0, order[np.maximum(positions, 0)], -1)

    def manifest_fields(self) -> dict:
        """What the index manifest records about the build."""
        return {
            "factory": self.factory,
            "metric": self.metric,
            "normalized_for_cosine": self.metric == "ip",
            "ntotal": int(self.index.ntotal),
            "dim": int(self.index.d),
            "search_params": self.tuning.search_params,
            "recall_at_10": round(self.tuning.recall, 4),
            "target_recall": self.tuning.target,
            "target_reached": self.tuning.reached,
            "recall_queries": self.n_queries,
            "held_out_rows_last": len(self.held_out),
            "recall_method": "held-out corpus rows (indexed last) vs exact search",
            "tuning": [{"value": v, "recall_at_10": round(r, 4)} for v, r in self.tuning.tried],
            "queries_per_s": round(self.queries_per_s, 1),
            "train_sample": self.train_sample,
            "device": self.device,
            "seconds": {name: round(value, 3) for name, value in self.seconds.items()},
        }


def sample_positions(
    n: int, n_train: int, n_queries: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted corpus rows for training and for held-out queries.

    At most a tenth of the corpus is held out, so that recall is measured on an index of
    nearly its final size. When the corpus has room for both, the two sets are disjoint;
    otherwise the training rows are drawn from all rows and may include queries.
    """
    rng = np.random.default_rng(seed)
    n_queries = min(n_queries, max(n // 10, 1 if n > 1 else 0))
    n_train = min(n_train, n)
    if n_train + n_queries <= n:
        picked = rng.choice(n, size=n_train + n_queries, replace=False)
        return np.sort(picked[n_queries:]), np.sort(picked[:n_queries])
    queries = np.sort(rng.choice(n, size=n_queries, replace=False))
    return np.sort(rng.choice(n, size=n_train, replace=False)), queries


def index_order(n: int, held_out: np.ndarray) -> np.ndarray:
    """Corpus row at each index position: rows in order without ``held_out``, then ``held_out``."""
    kept = np.ones(n, dtype=bool)
    kept[held_out] = False
    return np.concatenate([np.flatnonzero(kept), held_out]).astype(np.int64)


def skip_rows(
    batches: Iterable[np.ndarray], rows: np.ndarray, first_row: int = 0
) -> Iterator[np.ndarray]:
    """The batches without the corpus ``rows`` (sorted); the first batch starts at ``first_row``."""
    offset = first_row
    for vectors in batches:
        stop = offset + len(vectors)
        lo, hi = np.searchsorted(rows, [offset, stop])
        if hi > lo:
            keep = np.ones(len(vectors), dtype=bool)
            keep[rows[lo:hi] - offset] = False
            vectors = vectors[keep]
        offset = stop
        yield vectors


def gather_rows(source: VectorSource, positions: np.ndarray, batch_size: int) -> np.ndarray:
    """The vectors at sorted ``positions``, from one streamed pass: ``(len(positions), d)``."""
    out = np.empty((len(positions), source.dim), dtype=np.float32)
    offset = filled = 0
    for _, vectors in source.batches(batch_size):
        stop = offset + len(vectors)
        end = int(np.searchsorted(positions, stop))
        out[filled:end] = vectors[positions[filled:end] - offset]
        filled, offset = end, stop
        if filled == len(positions):
            break
    if filled != len(positions):
        raise ValueError(f"the vectors ended after {offset} rows; expected {source.count}")
    return out


def gather_prepared(
    source: VectorSource, positions: np.ndarray, metric: Metric, batch_size: int
) -> np.ndarray:
    """:func:`gather_rows` prepared for ``metric`` in place: the same values as
    ``prepare_vectors(gather_rows(...))`` without a second copy."""
    vectors = gather_rows(source, positions, batch_size)
    if metric == "ip":
        faiss.normalize_L2(vectors)
    return vectors


def take_rows(vectors: np.ndarray, keep: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """``vectors[keep]`` for sorted distinct ``keep``, moved to the front of ``vectors`` in
    place (a view of it is returned), so the rows are not copied a second time whole.

    Safe in place: row ``keep[i] >= i``, and each chunk reads its rows (into a ``chunk``-row
    temporary) before writing below them, never above where later chunks read.
    """
    for start in range(0, len(keep), chunk):
        stop = min(start + chunk, len(keep))
        vectors[start:stop] = vectors[keep[start:stop]]
    return vectors[: len(keep)]


def _on_device(index: faiss.Index, work: Callable[[faiss.Index], None], use_gpu: bool):
    """Run ``work`` on a GPU copy of ``index`` when asked and possible; ``(cpu_index, device)``.

    Index types without a GPU implementation (HNSW, ...) stay on the CPU.
    """
    if use_gpu:
        resources = faiss.StandardGpuResources()
        try:
            on_gpu = faiss.index_cpu_to_gpu(resources, 0, index)
        except RuntimeError as err:
            logger.info("no GPU version of %s (%s); using the CPU", type(index).__name__, err)
        else:
            work(on_gpu)
            return faiss.index_gpu_to_cpu(on_gpu), "gpu"
    work(index)
    return index, "cpu"


def train_on_sample(source: VectorSource, settings: BuildSettings) -> TrainedIndex:
    """Pick the training rows and held-out queries, and train the empty index.

    Raises:
        ValueError: empty source, bad factory string, or a training sample FAISS cannot use.
    """
    start = time.perf_counter()
    n = source.count
    if n == 0:
        raise ValueError("there are no vectors to index")
    index = new_index(settings.factory, source.dim, settings.metric)
    if settings.train_sample is not None and settings.train_sample <= 0:
        raise ValueError(f"--train-sample must be positive, got {settings.train_sample}")
    n_train = 0
    if not index.is_trained:
        n_train = min(n, settings.train_sample or default_train_sample(index, n))
        need = min_train_points(index)
        if n_train < need:
            raise ValueError(
                f"{settings.factory} needs at least {need} training vectors "
                f"({POINTS_PER_CENTROID * need} recommended), but only {n_train} are available "
                f"({n} vectors, --train-sample {settings.train_sample}); choose a smaller index "
                "or a larger sample"
            )
    train_rows, held_out = sample_positions(n, n_train, settings.n_queries, settings.seed)
    rows = np.union1d(train_rows, held_out)
    sample = gather_prepared(source, rows, settings.metric, settings.batch_size)
    queries = sample[np.searchsorted(rows, held_out)]
    device = "cpu"
    if n_train:
        train = take_rows(sample, np.searchsorted(rows, train_rows))  # in place: one copy
        del sample
        logger.info("training %s on %d vectors", settings.factory, n_train)
        index, device = _on_device(index, lambda target: target.train(train), settings.gpu())
        del train
    # The sample's reads and k-means' work space are freed; hand them back before the fill,
    # whose peak the planner counts from what was resident at the start.
    release_free_memory()
    return TrainedIndex(index, queries, held_out, n_train, device, time.perf_counter() - start)


def fill_index(
    index: faiss.Index,
    batches: Iterable[np.ndarray],
    metric: Metric,
    *,
    use_gpu: bool,
    exact: ExactTopK | None = None,
    total: int | None = None,
) -> tuple[faiss.Index, str]:
    """Add raw vector batches to a trained index (feeding ``exact`` the same batches);
    ``total``, the vectors expected, gives the progress bar its ETA.

    Returns:
        ``(index, device)``: the filled CPU index and where the adding ran.
    """

    def add_all(target: faiss.Index) -> None:
        with stage_progress("index fill", total=total, unit="vectors") as bar:
            for vectors in batches:
                prepared = prepare_vectors(vectors, metric)
                del vectors
                target.add(prepared)
                if exact is not None:
                    exact.add(prepared)
                bar.update(len(prepared))
                del prepared  # not alive while the next batch is read (the planner's count)

    return _on_device(index, add_all, use_gpu)


def finish_build(
    index: faiss.Index,
    trained: TrainedIndex,
    truth: np.ndarray,
    settings: BuildSettings,
    *,
    add_device: str,
    seconds: dict[str, float],
) -> BuiltIndex:
    """Tune the filled index against the exact answer and measure its throughput.

    ``index`` holds every row except the held-out ones; the caller adds those afterwards.
    """
    start = time.perf_counter()
    tuning = tune_search_parameter(index, trained.queries, truth, settings.target_recall)
    qps = queries_per_second(index, trained.queries, RECALL_K)
    logger.info(
        "%s: %s reaches recall@10 %.4f (target %.2f), %.0f queries/s",
        settings.factory,
        tuning.search_params or "exact search",
        tuning.recall,
        settings.target_recall,
        qps,
    )
    device = "gpu" if "gpu" in (trained.device, add_device) else "cpu"
    return BuiltIndex(
        index=index,
        factory=settings.factory,
        metric=settings.metric,
        tuning=tuning,
        queries_per_s=qps,
        n_queries=len(trained.queries),
        train_sample=trained.train_sample,
        device=device,
        held_out=trained.held_out,
        seconds={**seconds, "tune": time.perf_counter() - start},
    )


def build_index(source: VectorSource, settings: BuildSettings) -> BuiltIndex:
    """Train, fill and tune one index in this process.

    Example:
        >>> built = build_index(ArraySource(vectors), BuildSettings("IVF256,Flat"))
        >>> built.tuning.search_params  # the smallest nprobe reaching recall@10 0.95
        {'nprobe': 9}

    Raises:
        ValueError: empty source, bad factory string, too small a training sample, or a
            source that yields a different number of vectors than it counts.
    """
    trained = train_on_sample(source, settings)
    start = time.perf_counter()
    if not settings.gpu():  # every row, held-out ones too: they are added last
        batches = (vectors for _, vectors in source.batches(settings.batch_size))
        reserve_inverted_lists(trained.index, batches, settings.metric, total=source.count)
    exact = ExactTopK(trained.queries, RECALL_K, metric=settings.metric, kernel="faiss")
    batches = (vectors for _, vectors in source.batches(settings.batch_size))
    index, device = fill_index(
        trained.index,
        skip_rows(batches, trained.held_out),
        settings.metric,
        use_gpu=settings.gpu(),
        exact=exact,
        total=source.count - len(trained.held_out),
    )
    expected = source.count - len(trained.held_out)
    if index.ntotal != expected:
        raise ValueError(
            f"added {index.ntotal} vectors, expected {expected}: the source changed while read"
        )
    _, truth = exact.result()
    built = finish_build(
        index,
        trained,
        truth,
        settings,
        add_device=device,
        seconds={"train": trained.seconds, "add": time.perf_counter() - start},
    )
    index.add(trained.queries)  # held-out rows go last; see index_order()
    return built
