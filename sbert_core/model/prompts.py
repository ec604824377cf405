"""Prompts: the text a model wants before each input (``"query: "``, an instruction, ...).

Read from ``config_sentence_transformers.json`` (``prompts`` and ``default_prompt_name``) and
chosen exactly as sentence-transformers chooses them:

* an explicit ``prompt`` text wins; otherwise ``prompt_name`` looks one up (unknown names are
  an error listing the known ones);
* with neither, ``task="query"`` takes the model's ``query`` prompt and ``task="document"`` its
  ``document`` prompt (what ``encode_query`` / ``encode_document`` do; a model that names none
  gets the empty prompt, not its default), and no task takes ``default_prompt_name``'s prompt;
* the prompt is prepended to each text as is; an empty prompt is no prompt.

Every model has the ``query`` and ``document`` names, empty unless the model fills them, as in
sentence-transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sbert_core.errors import ModelLoadError
from sbert_core.model.json_files import read_json_object

CONFIG_FILE = "config_sentence_transformers.json"
PromptTask = Literal["query", "document"]
PROMPT_TASKS: tuple[str, ...] = ("query", "document")
# Names every sentence-transformers model has (empty unless the model's config fills them).
_DEFAULT_NAMES = ("query", "document")


@dataclass(frozen=True)
class PromptSettings:
    """A model's prompts and the name of the one applied by default.

    Attributes:
        prompts: prompt name -> text (``query`` and ``document`` always present).
        default_prompt_name: the prompt applied when none is asked for, or None.
    """

    prompts: Mapping[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None

    def __post_init__(self) -> None:
        merged = {name: "" for name in _DEFAULT_NAMES}
        merged.update({str(k): ("" if v is None else v) for k, v in dict(self.prompts).items()})
        for name, text in merged.items():
            if not isinstance(text, str):
                raise ValueError(f"prompt {name!r} must be a string, got {type(text).__name__}")
        if self.default_prompt_name is not None and self.default_prompt_name not in merged:
            raise ValueError(
                f"default_prompt_name {self.default_prompt_name!r} is not one of the prompts "
                f"({', '.join(sorted(merged))})"
            )
        object.__setattr__(self, "prompts", dict(sorted(merged.items())))

    @classmethod
    def read(cls, model_dir: Path) -> PromptSettings:
        """The settings in ``model_dir/config_sentence_transformers.json`` (none if absent).

        Raises:
            ModelLoadError: the file is unreadable, or its prompts are not name -> text, or the
                default names no prompt.
        """
        path = model_dir / CONFIG_FILE
        if not path.is_file():
            return cls()
        config = read_json_object(path)
        prompts = config.get("prompts") or {}
        default = config.get("default_prompt_name")
        if not isinstance(prompts, dict) or not (default is None or isinstance(default, str)):
            raise ModelLoadError(
                f"{path}: 'prompts' must map names to texts and 'default_prompt_name' be a name"
            )
        try:
            return cls(prompts, default)
        except ValueError as err:
            raise ModelLoadError(f"{path}: {err}") from err

    def resolve(
        self,
        prompt_name: str | None = None,
        prompt: str | None = None,
        task: PromptTask | None = None,
    ) -> str:
        """The prompt text to prepend ("" for none), chosen as sentence-transformers does.

        Args:
            prompt_name: one of :attr:`prompts`.
            prompt: an explicit text (not together with ``prompt_name``).
            task: ``"query"`` or ``"document"`` to use that prompt when neither is given.

        Raises:
            ValueError: both given, an unknown name or task, or a non-string prompt.
        """
        if prompt is not None:
            if prompt_name is not None:
                raise ValueError("give either a prompt name or a prompt text, not both")
            if not isinstance(prompt, str):
                raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
            return prompt
        if task is not None and task not in PROMPT_TASKS:
            raise ValueError(f"unknown task {task!r}; valid tasks are: {', '.join(PROMPT_TASKS)}")
        name = prompt_name if prompt_name is not None else task or self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise ValueError(
                f"unknown prompt name {name!r}; this model's prompts are: "
                f"{', '.join(repr(n) for n in self.prompts)}"
            )
        return self.prompts[name]

    def with_default(self, prompt_name: str | None, prompt: str | None) -> PromptSettings:
        """These settings with ``prompt_name``, or the prompt text ``prompt``, as the default.

        A text that is none of the prompts is added under the name ``training`` (``training_2``,
        ... if that name is taken). This is how a model trained with a prompt records it.

        Raises:
            ValueError: both or neither given, or an unknown name.
        """
        if (prompt_name is None) == (prompt is None):
            raise ValueError("give exactly one of a prompt name or a prompt text")
        if prompt_name is not None:
            self.resolve(prompt_name=prompt_name)
            return PromptSettings(self.prompts, prompt_name)
        name = self.name_of(prompt) if prompt else None
        if name is None:
            name = next(
                candidate
                for candidate in ("training", *(f"training_{i}" for i in range(2, 1000)))
                if candidate not in self.prompts
            )
        return PromptSettings({**self.prompts, name: prompt}, name)

    def name_of(self, prompt: str) -> str | None:
        """A prompt name whose text is ``prompt`` (the first in name order), or None."""
        return next((name for name, text in self.prompts.items() if text == prompt), None)

    def to_dict(self) -> dict:
        """The two keys of ``config_sentence_transformers.json`` this describes."""
        return {"prompts": dict(self.prompts), "default_prompt_name": self.default_prompt_name}


def prompt_token_count(tokenizer, prompt: str, *, max_seq_length: int, lower: bool = False) -> int:
    """How many leading tokens of ``prompt + text`` are the prompt's, as sentence-transformers
    counts them for ``include_prompt=False``: the prompt tokenised alone (special tokens and
    truncation as for a text), less a trailing special token (``[SEP]``, ``</s>``, EOS).

    Leading special tokens (``[CLS]``, ``<s>``) count as prompt, so they are left out of pooling
    with it, as there.
    """
    if not prompt:
        return 0
    ids = tokenizer(
        [prompt.lower() if lower else prompt],
        add_special_tokens=True,
        truncation=True,
        max_length=max_seq_length,
        padding=False,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )["input_ids"][0]
    count = len(ids)
    if ids and ids[-1] in set(tokenizer.all_special_ids):
        count -= 1
    return count
