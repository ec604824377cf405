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
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import faiss
import numpy as np

from pipelines.index.planner import POINTS_PER_CENTROID
from pipelines.vectors.checks import require_finite

logger = logging.getLogger(__name__)

Metric = Literal["ip", "l2"]
RECALL_K = 10
# Needing efSearch beyond this means the graph is too sparse for the data (raise M or use
# another index), not that a larger value should be searched for; tuning stops there.
MAX_EF_SEARCH = 4096
_FAISS_ERROR = re.compile(r"^Error in .*? at \S+:\d+: (?:Error: '.*?' failed: )?")


class VectorSource(Protocol):
    """Vectors that can be read more than once, in the same order, in bounded batches.

    ``pipelines.io.embeddings.EmbeddingsDataset`` is one; :class:`ArraySource` wraps arrays.
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
        factory: a FAISS ``index_factory`` string (``pipelines.index.planner`` picks one).
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
    batch_size: int = 65536
    seed: int = 0
    use_gpu: bool | None = None

    def gpu(self) -> bool:
        """Whether to use the GPU for training and adding."""
        return faiss.get_num_gpus() > 0 if self.use_gpu is None else self.use_gpu


@dataclass(frozen=True)
class Tuning:
    """The tuned search parameter and the recall@10 measured at each value tried."""

    parameter: str | None  # None: the index is exact and has nothing to tune
    value: int | None
    recall: float
    target: float
    tried: tuple[tuple[int, float], ...] = ()

    @property
    def reached(self) -> bool:
        """Whether the chosen value reaches the target recall."""
        return self.recall >= self.target

    @property
    def search_params(self) -> dict[str, int]:
        """``{parameter: value}`` for ``ParameterSpace``; empty for exact indexes."""
        return {} if self.parameter is None else {self.parameter: int(self.value)}


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
    tuning: Tuning
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


def faiss_metric(metric: Metric) -> int:
    """FAISS's metric constant for ``ip`` / ``l2``."""
    if metric == "ip":
        return faiss.METRIC_INNER_PRODUCT
    if metric == "l2":
        return faiss.METRIC_L2
    raise ValueError(f"metric must be 'ip' or 'l2', got {metric!r}")


def faiss_message(err: Exception) -> str:
    """A FAISS C++ exception without its ``Error in <signature> at <file>:<line>`` prefix."""
    return _FAISS_ERROR.sub("", str(err).strip().splitlines()[0])


def new_index(factory: str, dim: int, metric: Metric) -> faiss.Index:
    """An empty index from a factory string.

    Raises:
        ValueError: FAISS cannot parse the string or build it for this dimension.
    """
    try:
        index = faiss.index_factory(dim, factory, faiss_metric(metric))
    except RuntimeError as err:
        raise ValueError(
            f"FAISS cannot build the index {factory!r} for {dim}-d vectors: {faiss_message(err)}"
        ) from err
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and isinstance(faiss.downcast_index(ivf), faiss.IndexIVFPQ):
        # The factory turns on polysemous training for "PQ{m}", which only serves Hamming
        # pre-filtering (never used here) and made PQ training ~3x slower in our runs.
        faiss.downcast_index(ivf).do_polysemous_training = False
    return index


def prepare_vectors(vectors: np.ndarray, metric: Metric) -> np.ndarray:
    """A contiguous float32 copy, L2-normalised for ``ip`` so inner product is cosine."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    if metric == "ip":
        faiss.normalize_L2(out)
    return out


def search_parameter(index: faiss.Index) -> tuple[str, int, int] | None:
    """``(name, smallest, largest)`` of the parameter that trades speed for recall, or None."""
    if isinstance(index, faiss.IndexShards):
        index = faiss.downcast_index(index.at(0))
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return "nprobe", 1, int(ivf.nlist)
    base = (
        faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    )
    if isinstance(base, faiss.IndexHNSW):
        return "efSearch", RECALL_K, MAX_EF_SEARCH
    return None


def set_search_params(index: faiss.Index, params: dict[str, int]) -> None:
    """Apply ``{"nprobe": 12}``-style parameters through ``faiss.ParameterSpace``."""
    space = faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, int(value))


def min_train_points(index: faiss.Index) -> int:
    """Fewest training vectors FAISS accepts: one per IVF list, 2^nbits for PQ codebooks."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        base = faiss.downcast_index(ivf)
    elif isinstance(index, faiss.IndexPreTransform):
        base = faiss.downcast_index(index.index)
    else:
        base = index
    need = int(ivf.nlist) if ivf is not None else 1
    quantizer = getattr(base, "pq", None)
    if quantizer is not None:
        need = max(need, int(quantizer.ksub))
    return need


def default_train_sample(index: faiss.Index, n: int) -> int:
    """Training vectors for an index over N vectors (0 for indexes that need no training).

    64 per IVF list (FAISS wants 39-256; k-means subsamples above 256), at least 64·256 when
    PQ codebooks are trained, at most 500k above the 39-per-list minimum (memory), at most N.
    """
    if index.is_trained:
        return 0
    ivf = faiss.try_extract_index_ivf(index)
    nlist = int(ivf.nlist) if ivf is not None else 1
    wanted = max(64 * nlist, 64 * min_train_points(index))
    return min(n, max(POINTS_PER_CENTROID * nlist, min(wanted, 500_000)))


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


class ExactNeighbours:
    """Exact top-k of fixed queries over vectors that arrive batch by batch.

    Positions count from ``offset`` in arrival order, so shards can each keep one and
    :meth:`merge` combines them into the answer over the whole corpus.
    """

    def __init__(self, queries: np.ndarray, k: int, metric: Metric, offset: int = 0) -> None:
        self._queries = queries
        self._k = k
        self._metric = metric
        self._heap = faiss.ResultHeap(len(queries), k, keep_max=metric == "ip")
        self._next = offset

    def add(self, vectors: np.ndarray) -> None:
        """Fold in the next batch (already prepared for the metric)."""
        k = min(self._k, len(vectors))
        if k:
            distances, positions = faiss.knn(
                self._queries, vectors, k, metric=faiss_metric(self._metric)
            )
            self._heap.add_result(distances, positions + self._next)
        self._next += len(vectors)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(distances, positions)``, each ``(nq, k)``, best first (-1 where fewer than k)."""
        self._heap.finalize()
        return self._heap.D, self._heap.I

    @staticmethod
    def merge(
        parts: Iterable[tuple[np.ndarray, np.ndarray]], k: int, metric: Metric
    ) -> tuple[np.ndarray, np.ndarray]:
        """Combine per-shard results (positions already global) into the corpus-wide top-k."""
        heap = None
        for distances, positions in parts:
            if heap is None:
                heap = faiss.ResultHeap(len(distances), k, keep_max=metric == "ip")
            keep = positions >= 0
            # Padding slots of a shard smaller than k must never win against real rows.
            worst = -np.inf if metric == "ip" else np.inf
            heap.add_result(
                np.where(keep, distances, worst).astype(np.float32),
                np.where(keep, positions, -1).astype(np.int64),
            )
        if heap is None:
            raise ValueError("no exact-search results to merge")
        heap.finalize()
        return heap.D, heap.I


def recall_at_k(found: np.ndarray, truth: np.ndarray, k: int = RECALL_K) -> float:
    """Mean share of the true top-k that the approximate top-k contains.

    Args:
        found, truth: ``(nq, >= k)`` positions, best first; -1 marks empty slots (an index
            with fewer than k vectors), which count neither as hits nor as misses.
        k: list length compared.

    Returns:
        The recall, or 1.0 when there is nothing to find.
    """
    hits = total = 0
    for found_row, true_row in zip(found[:, :k], truth[:, :k], strict=True):
        true_top = set(true_row[true_row >= 0].tolist())
        hits += len(true_top.intersection(found_row.tolist()))
        total += len(true_top)
    return hits / total if total else 1.0


def tune_search_parameter(
    index: faiss.Index,
    queries: np.ndarray,
    truth: np.ndarray,
    target: float,
    k: int = RECALL_K,
) -> Tuning:
    """Set the smallest search parameter whose recall@k reaches ``target`` (and leave it set).

    Doubles the value until the target is met, then bisects between the last value that missed
    and the first that met it (recall grows with nprobe/efSearch). If even the largest value
    misses, the largest is kept and the returned tuning says the target was not reached.
    """
    parameter = search_parameter(index)
    if parameter is None:
        _, found = index.search(queries, k)
        return Tuning(None, None, recall_at_k(found, truth, k), target)
    name, smallest, largest = parameter
    tried: dict[int, float] = {}

    def recall_at(value: int) -> float:
        if value not in tried:
            set_search_params(index, {name: value})
            _, found = index.search(queries, k)
            tried[value] = recall_at_k(found, truth, k)
        return tried[value]

    missed, value = None, smallest
    while recall_at(value) < target and value < largest:
        missed, value = value, min(2 * value, largest)
    if recall_at(value) >= target and missed is not None:
        met = value
        while met - missed > 1:
            middle = (met + missed) // 2
            if recall_at(middle) >= target:
                met = middle
            else:
                missed = middle
        value = met
    set_search_params(index, {name: value})
    return Tuning(name, value, tried[value], target, tuple(sorted(tried.items())))


def queries_per_second(index: faiss.Index, queries: np.ndarray, k: int, repeats: int = 3) -> float:
    """Batch search throughput: median over ``repeats`` searches of all ``queries``."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(queries, k)
        seconds.append(time.perf_counter() - start)
    return len(queries) / max(statistics.median(seconds), 1e-9)


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
    sample = gather_rows(source, rows, settings.batch_size)
    queries = prepare_vectors(sample[np.searchsorted(rows, held_out)], settings.metric)
    device = "cpu"
    if n_train:
        train = prepare_vectors(sample[np.searchsorted(rows, train_rows)], settings.metric)
        del sample
        logger.info("training %s on %d vectors", settings.factory, n_train)
        index, device = _on_device(index, lambda target: target.train(train), settings.gpu())
    return TrainedIndex(index, queries, held_out, n_train, device, time.perf_counter() - start)


def fill_index(
    index: faiss.Index,
    batches: Iterable[np.ndarray],
    metric: Metric,
    *,
    use_gpu: bool,
    exact: ExactNeighbours | None = None,
) -> tuple[faiss.Index, str]:
    """Add raw vector batches to a trained index (feeding ``exact`` the same batches).

    Returns:
        ``(index, device)``: the filled CPU index and where the adding ran.
    """

    def add_all(target: faiss.Index) -> None:
        for vectors in batches:
            prepared = prepare_vectors(vectors, metric)
            target.add(prepared)
            if exact is not None:
                exact.add(prepared)

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
    exact = ExactNeighbours(trained.queries, RECALL_K, settings.metric)
    batches = (vectors for _, vectors in source.batches(settings.batch_size))
    index, device = fill_index(
        trained.index,
        skip_rows(batches, trained.held_out),
        settings.metric,
        use_gpu=settings.gpu(),
        exact=exact,
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
