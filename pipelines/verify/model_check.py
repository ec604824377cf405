"""The checks of verify's cross-encoder that its files answer, without loading weights: run by
``sbert run`` before the job's first stage and by ``sbert verify`` before it reads any pair, so
a folder that is no cross-encoder, or one that gives several scores per pair (an NLI model's
three labels), is refused before anything is computed."""

from __future__ import annotations


def require_one_score(model: str, num_labels: int) -> None:
    """Refuse a cross-encoder that gives ``num_labels`` != 1 scores per pair.

    Raises:
        ValueError: naming the model and its label count.
    """
    if num_labels != 1:
        raise ValueError(
            f"--model {model}: the cross-encoder gives {num_labels} scores per pair; verify "
            "needs one (a duplicate score)"
        )


def check_cross_encoder(model: str) -> None:
    """Refuse ``model`` unless its folder is a cross-encoder with one score per pair, from its
    configuration files (modules, ``config.json``, tokenizer); no weight is read.

    Raises:
        ModelLoadError: no such folder, a folder of another model type (a bi-encoder), an
            unreadable config or tokenizer, an unsupported architecture.
        ValueError: several scores per pair (:func:`require_one_score`).
    """
    from sbert_core.model.cross_encoder_folder import (
        read_config_and_tokenizer,
        read_cross_encoder_layout,
    )
    from sbert_core.model.source import resolve_model_dir

    directory, _ = resolve_model_dir(model)
    layout = read_cross_encoder_layout(directory)
    config, _ = read_config_and_tokenizer(layout, directory)
    require_one_score(model, int(config.num_labels))
