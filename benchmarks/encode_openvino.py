"""sentence-transformers with its OpenVINO backend, as a contender process of benchmarks/encode.py.

``SentenceTransformer(..., backend="openvino")`` needs optimum-intel, whose releases pin
``transformers<5.6`` (2.2.0) while this project runs transformers 5.24; so this contender runs
in its own process with an older transformers put first on its path (``--openvino-site`` of
benchmarks/encode.py), and the parent times it between its own contenders (interleaved).

Two models: ``openvino`` (fp32 IR exported offline from the local model folder) and
``openvino_int8`` (NNCF static int8, the recipe of sentence-transformers'
``export_static_quantized_openvino_model``: ``OVQuantizer`` with the default
``OVQuantizationConfig``, 300 calibration texts), with
two changes: the calibration texts are a sample of the benchmark corpus instead of the hub's
GLUE SST-2, so it works offline, and they are padded to the longest of them rather than to 384
tokens (pad tokens carry no statistics worth collecting and cost minutes on 2 cores).

Protocol, one JSON object per line on stdin and stdout:
``{"time": name}`` -> ``{"seconds": s}`` (encode the corpus once);
``{"embed": name, "texts": path_json, "out": path_npy}`` -> ``{"ok": true}``;
``{"quit": true}`` ends. The first line out is ``{"ready": [names], "precision": {name: hint}}``:
the precision OpenVINO's CPU plugin runs each model's floating-point layers in (its
``INFERENCE_PRECISION_HINT`` as compiled). optimum-intel sets none, so the plugin's default
applies, and that default is bf16 on CPUs with native bf16 (AVX512-BF16 or AMX): there the
"fp32" export runs bf16 products.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CALIBRATION_SAMPLES = 300


def _load(model_dir: str, corpus: list[str], work: Path) -> dict:
    """The fp32 and int8 OpenVINO SentenceTransformers, built offline from ``model_dir``."""
    from datasets import Dataset
    from optimum.intel.openvino import OVConfig, OVQuantizationConfig, OVQuantizer
    from sentence_transformers import SentenceTransformer

    local = work / "model"
    shutil.copytree(model_dir, local)
    fp32 = SentenceTransformer(str(local), device="cpu", backend="openvino")
    config = OVConfig(quantization_config=OVQuantizationConfig(num_samples=CALIBRATION_SAMPLES))
    # The quantizer rewrites the model it is given in place: give it a copy of its own.
    to_quantize = SentenceTransformer(str(local), device="cpu", backend="openvino")
    quantizer = OVQuantizer.from_pretrained(to_quantize.transformers_model)
    step = max(1, len(corpus) // CALIBRATION_SAMPLES)
    sample = corpus[::step][:CALIBRATION_SAMPLES]
    calibration = Dataset.from_dict({"sentence": sample}).map(
        lambda rows: fp32.tokenizer(rows["sentence"], padding="longest", truncation=True),
        batched=True,
        remove_columns=["sentence"],
    )
    quantizer.quantize(calibration, save_directory=str(local / "openvino_int8"), ov_config=config)
    # optimum-intel writes the IR into an ``openvino/`` folder of the save directory.
    (int8_ir,) = (local / "openvino_int8").rglob("openvino_model.xml")
    int8 = SentenceTransformer(
        str(local),
        device="cpu",
        backend="openvino",
        model_kwargs={"file_name": str(int8_ir.relative_to(local))},
    )
    return {"openvino": fp32, "openvino_int8": int8}


def _compiled_precision(model) -> str:
    """The inference precision of the OpenVINO model behind a SentenceTransformer (``bf16``,
    ``f32``), read from the compiled model (it is compiled by the warm-up encode)."""
    compiled = model[0].auto_model.request
    return compiled.get_property("INFERENCE_PRECISION_HINT").to_string()


def main() -> None:
    model_dir, corpus_path, batch_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # The protocol owns the real stdout; whatever the libraries print (NNCF, optimum, OpenVINO's
    # C++ side) goes to stderr, file descriptor 1 included.
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    corpus = json.loads(Path(corpus_path).read_text())
    with tempfile.TemporaryDirectory(prefix="st-openvino-") as work:
        models = _load(model_dir, corpus, Path(work))
        for model in models.values():
            model.encode(corpus[:256], batch_size=batch_size)
        precision = {name: _compiled_precision(model) for name, model in models.items()}
        print(
            json.dumps({"ready": list(models), "precision": precision}), file=protocol, flush=True
        )
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("quit"):
                break
            if "time" in request:
                start = time.perf_counter()
                models[request["time"]].encode(corpus, batch_size=batch_size)
                print(
                    json.dumps({"seconds": time.perf_counter() - start}), file=protocol, flush=True
                )
            else:
                texts = json.loads(Path(request["texts"]).read_text())
                vectors = models[request["embed"]].encode(texts, batch_size=batch_size)
                np.save(request["out"], np.asarray(vectors, dtype=np.float32))
                print(json.dumps({"ok": True}), file=protocol, flush=True)


if __name__ == "__main__":
    main()
