"""``sbert encode``: embed one file on this machine into ``.npy`` or ``.parquet``.

For corpora that need sharding, dead-letter handling and manifests, use ``sbert embed``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sbert_pipeline.jobs.model_flags import (
    DeprecatedAlias,
    add_model_arguments,
    settings_from_flags,
)
from sbert_pipeline.jobs.parsers import HelpFormatter
from sbert_pipeline.jobs.parsers.stage_help import Switch

from sbert_core.tabular import read_table, text_column

OUTPUT_SUFFIXES = (".npy", ".parquet")
DESCRIPTION = """Embed one file on this machine into FILE.npy or FILE.parquet. For corpora that
need sharding, rejected rows and manifests, use sbert embed.

More: docs/commands.md#encode, docs/models.md"""


def add_parser(subparsers) -> None:
    """Register ``encode`` on the top-level subparsers."""
    parser = subparsers.add_parser(
        "encode",
        help="embed one file locally",
        description=DESCRIPTION,
        usage="sbert encode --input FILE --output FILE [options]",
        formatter_class=HelpFormatter,
    )
    add_model_arguments(parser, old_dtype_flag=True, normalize=True)
    parser.add_argument(
        "--input",
        required=True,
        metavar="FILE",
        help="TXT/TSV/CSV/JSONL/Parquet file, gzip allowed",
    )
    parser.add_argument("--output", required=True, metavar="FILE", help="FILE.npy or FILE.parquet")
    parser.add_argument(
        "--text-field", default="text", metavar="FIELD", help="column holding the text"
    )
    parser.add_argument(
        "--id-field",
        default=None,
        metavar="FIELD",
        help="column holding ids (default: the row number)",
    )
    # The names before the options were spelled as in sbert embed.
    parser.add_argument("--text-col", dest="text_field", action=DeprecatedAlias, new="--text-field")
    parser.add_argument("--id-col", dest="id_field", action=DeprecatedAlias, new="--id-field")
    parser.add_argument(
        "--format", default=None, help="input format if the extension does not tell"
    )
    parser.add_argument(
        "--keep-text", action=Switch, default=False, help="store the text in the Parquet output"
    )
    parser.add_argument(
        "--overwrite", action=Switch, default=False, help="replace an existing output file"
    )
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Read, encode, and write the output atomically; print a one-line summary."""
    output = Path(args.output)
    if output.suffix not in OUTPUT_SUFFIXES:
        raise ValueError(f"--output must end in {' or '.join(OUTPUT_SUFFIXES)}, got {output}")
    if output.exists() and not args.overwrite:
        raise FileExistsError(f"{output} exists; pass --overwrite to replace it")
    table = read_table(args.input, args.format)
    texts = text_column(table, args.text_field)
    ids = (
        [str(v) for v in table.column(args.id_field)]
        if args.id_field
        else [str(i) for i in range(len(texts))]
    )

    settings = settings_from_flags(args)
    encoder = settings.load()
    start = time.perf_counter()
    result = encoder.encode_detailed(texts, show_progress=True, **settings.encode_kwargs())
    seconds = time.perf_counter() - start

    from sbert_pipeline.io.atomic import local_replacing  # Beam's filesystems: only when writing

    with local_replacing(str(output)) as tmp_name:
        if output.suffix == ".npy":
            import numpy as np

            with open(tmp_name, "wb") as tmp:
                np.save(tmp, result.embeddings)
        else:
            import pyarrow.parquet as pq
            from sbert_pipeline.io.schemas import embeddings_table

            texts_out = texts if args.keep_text else None
            pq.write_table(
                embeddings_table(
                    ids, result.embeddings, result.n_tokens, result.truncated, texts=texts_out
                ),
                tmp_name,
            )
    rate = len(texts) / seconds if seconds > 0 else float("inf")
    print(
        f"encoded {len(texts)} texts ({result.n_truncated} truncated at {encoder.max_seq_length} "
        f"tokens) in {seconds:.1f}s ({rate:.0f}/s) -> {output}"
    )
    return 0
