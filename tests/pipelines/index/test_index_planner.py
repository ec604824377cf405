import faiss
import numpy as np
import pytest
from sbert_pipeline.index.faiss_ops import new_index
from sbert_pipeline.index.planner import (
    BudgetTooSmallError,
    estimate_for_factory,
    ivf_nlist,
    plan_index,
)
from sbert_pipeline.io.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4GB", 4 * 10**9),
        ("512MiB", 512 * 2**20),
        ("2G", 2 * 2**30),
        ("1.5GiB", 3 * 2**29),
        (" 8 kb ", 8000),
        ("1024", 1024),
        (1024, 1024),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["4 parsecs", "", "GB", "-1GB", "0", "0.1B"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(3 * 2**29) == "1.50 GiB"


@pytest.mark.parametrize(
    ("n", "nlist"),
    [
        (1_000_000, 4096),  # 4·sqrt(N) = 4000
        (100_000, 1024),  # 1265 -> nearest power of two
        (10_000, 256),  # 400 -> 512, but k-means wants 39 points per list: N/39 = 256
        (100, 16),  # floor
        (10**12, 65536),  # ceiling
    ],
)
def test_ivf_nlist(n, nlist):
    assert ivf_nlist(n) == nlist


@pytest.mark.parametrize(
    ("n", "budget", "factory"),
    [
        (5_000, "1GB", "Flat"),  # exact search is cheap
        (1_000_000, "2GB", "HNSW32"),  # vectors 1.54 GB + graph 0.27 GB fit
        (1_000_000, "1.7GB", "HNSW16"),  # HNSW32 needs 1.81 GB, HNSW16 1.68 GB
        (1_000_000, "1.6GB", "IVF4096,Flat"),  # 1.55 GB: vectors fit, no graph does
        (1_000_000, "1GB", "IVF4096,SQ8"),  # 0.40 GB: a byte per component fits
        (1_000_000, "350MB", "OPQ192,IVF4096,PQ192"),  # compressed, the largest code that fits
        (1_000_000, "100MB", "OPQ64,IVF4096,PQ64"),
        (50_000_000, "100GB", "IVF32768,Flat"),  # too large to build one HNSW graph
    ],
)
def test_plan_choices(n, budget, factory):
    plan = plan_index(n, 384, "ip", parse_size(budget))
    assert plan.chosen.factory == factory
    assert plan.chosen.bytes <= plan.budget_bytes
    before = plan.considered[: plan.considered.index(plan.chosen)]
    assert all(candidate.bytes > plan.budget_bytes for candidate in before)
    record = plan.to_json()
    assert record["chosen"]["factory"] == factory
    assert [c["fits"] for c in record["considered"]][: len(before) + 1] == [False] * len(before) + [
        True
    ]


def test_plan_refuses_a_budget_nothing_fits():
    with pytest.raises(BudgetTooSmallError, match=r"OPQ4,IVF4096,PQ4, needs 18\.57 MiB") as err:
        plan_index(1_000_000, 384, "ip", parse_size("10MB"))
    assert "raise --memory-budget" in str(err.value) and "1,000,000 vectors" in str(err.value)


def test_plan_refuses_bad_input():
    with pytest.raises(ValueError, match="metric"):
        plan_index(1000, 32, "cosine", 10**9)
    with pytest.raises(ValueError, match="0 vectors"):
        plan_index(0, 32, "ip", 10**9)


def test_l2_ivf_pq_counts_the_precomputed_table():
    ip = estimate_for_factory("OPQ16,IVF1024,PQ16", 10**6, 384, "ip")
    l2 = estimate_for_factory("OPQ16,IVF1024,PQ16", 10**6, 384, "l2")
    assert l2.bytes - ip.bytes == 4 * 1024 * 16 * 256


@pytest.mark.parametrize(
    "factory",
    ["Flat", "HNSW32", "HNSW16", "IVF64,Flat", "IVF64,SQ8", "OPQ8,IVF64,PQ8", "OPQ4_28,IVF64,PQ4"],
)
def test_estimates_match_what_faiss_stores(factory):
    """The formulas against the size of the filled index as FAISS serialises it."""
    n, dim = 8000, 32
    vectors = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
    index = new_index(factory, dim, "ip")
    if isinstance(index, faiss.IndexPreTransform):
        # Few k-means and OPQ iterations: the stored layout is the same, and the defaults take
        # minutes on two cores.
        opq = faiss.downcast_VectorTransform(index.chain.at(0))
        opq.niter, opq.niter_pq, opq.niter_pq_0 = 1, 1, 1
        faiss.downcast_index(faiss.extract_index_ivf(index)).pq.cp.niter = 2
    if not index.is_trained:
        index.train(vectors[:4000])
    index.add(vectors)
    stored = faiss.serialize_index(index).size
    estimate = estimate_for_factory(factory, n, dim, "ip")
    assert estimate is not None and estimate.factory == factory
    assert abs(estimate.bytes - stored) <= 0.02 * stored
