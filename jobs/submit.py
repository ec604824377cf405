"""``sbert submit``: run a job from a YAML config (the way to reach Dataflow, Spark and Flink).

    sbert submit deploy/dataflow/embed-gpu.yaml [--set args.output=gs://b/out] [--dry-run]

A config names the job, its options and Beam's pipeline options::

    job: embed
    args:                          # the job's own options, spelled as on its command line
      input: gs://${GCS_BUCKET}/corpus/*.jsonl.gz
      output: gs://${GCS_BUCKET}/embeddings
      keep-text: true              # true -> --keep-text, false -> left out
      normalize: false             # -> --no-normalize (the option has a negative form)
      keep-fields: [title, url]    # -> --keep-fields=title,url
    beam:                          # Beam PipelineOptions, spelled as Beam spells them
      runner: DataflowRunner
      project: ${GCP_PROJECT}
      experiments: [use_runner_v2] # -> one --experiments=... per item

``${VAR}`` is replaced by the environment variable VAR; an unset or empty one is an error.
Every option name is checked against the job's parser and Beam's own parser, so a typo fails
here instead of being dropped with a warning by Beam. ``--set SECTION.KEY=VALUE`` overrides a
value before the variables are expanded; VALUE ``true``/``false`` switches a flag, ``null``
removes the option, ``[a, b]`` gives a list, anything else stays a string.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from jobs.argv import check_values, option_actions, to_argv
from jobs.parsers.submit import build_parser
from sbert_core.config import load_yaml, parse_override

# Job name -> module with ``build_parser()`` and ``run(argv)``; later jobs register here.
JOBS = {"embed": "jobs.embed"}
SECTIONS = ("args", "beam")
_TOP_LEVEL_KEYS = {"job", *SECTIONS}
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def load_job_config(path: str | Path, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Read a job config, apply ``--set`` overrides and expand ``${VAR}`` references.

    Args:
        path: the YAML file.
        overrides: ``"args.KEY=VALUE"`` or ``"beam.KEY=VALUE"`` strings, applied in order.

    Returns:
        ``{"job": name, "args": {...}, "beam": {...}}`` with every variable expanded.

    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid YAML, an unknown job or top-level key, a malformed override, or
            an environment variable that is not set.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"job config {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the config ({err})") from None
    config = _validate(load_yaml(text, str(path), kind="YAML"), path)  # refuses YAML aliases
    for override in overrides:
        _apply_override(config, override)
    return _expand(config, path)


def job_argv(config: Mapping[str, Any]) -> list[str]:
    """The job's own options from ``config["args"]``, checked against the job's parser."""
    parser = job_module(config["job"]).build_parser()
    actions = option_actions(parser)
    argv = to_argv(config["args"], actions, "args")
    given = {token.split("=", 1)[0] for token in argv}
    missing = sorted(
        {
            f"args.{action.option_strings[0].lstrip('-')}"
            for action in actions.values()
            if action.required and not given.intersection(action.option_strings)
        }
    )
    if missing:
        raise ValueError(f"job {config['job']!r} needs {', '.join(missing)}")
    check_values("args", parser, argv)
    return argv


def beam_argv(config: Mapping[str, Any]) -> list[str]:
    """Beam pipeline options from ``config["beam"]``, checked against Beam's own parser."""
    parser = beam_parser()
    argv = to_argv(
        config["beam"],
        option_actions(parser),
        "beam",
        negative="--no_",
        repeat_lists=True,  # Beam's list options accumulate: one flag per item
        allow_mappings=True,
    )
    check_values("beam", parser, argv)
    return argv


def config_to_argv(config: Mapping[str, Any]) -> list[str]:
    """The job's command line for ``config``: job options first, then Beam options.

    Example:
        >>> config_to_argv({"job": "embed", "args": {"input": "in/*.txt", "output": "out"},
        ...                 "beam": {"runner": "DataflowRunner"}})
        ['--input=in/*.txt', '--output=out', '--runner=DataflowRunner']
    """
    return job_argv(config) + beam_argv(config)


def job_module(name: str) -> ModuleType:
    """The module that implements job ``name``."""
    if name not in JOBS:
        raise ValueError(f"unknown job {name!r}; known jobs: {', '.join(sorted(JOBS))}")
    return importlib.import_module(JOBS[name])


def beam_parser() -> argparse.ArgumentParser:
    """Beam's parser with every registered ``PipelineOptions`` class, as Beam builds it."""
    parsers: list[argparse.ArgumentParser] = []
    # The callback hands over the parser Beam itself assembles from all option classes, so
    # runner options (Dataflow, Spark, Flink, portable) are known exactly as Beam knows them.
    PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    return parsers[0]


def main(argv: list[str]) -> int:
    """CLI entry (``argv`` is what follows ``sbert submit``): run the job or print its command.

    Returns:
        The exit status, 0 on success.
    """
    args = build_parser().parse_args(argv)
    config = load_job_config(args.config, args.overrides)
    command = config_to_argv(config)
    if args.dry_run:
        print(shlex.join(["sbert", config["job"], *command]))
        return 0
    summary = job_module(config["job"]).run(command)
    print(summary.line())
    return 0


def _validate(raw: object, path: Path) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping with keys job, args, beam")
    unknown = sorted(str(key) for key in raw if key not in _TOP_LEVEL_KEYS)
    if unknown:
        raise ValueError(
            f"{path}: unknown top-level key(s) {', '.join(unknown)}; allowed: job, args, beam"
        )
    job = raw.get("job")
    if not isinstance(job, str):
        raise ValueError(f"{path}: 'job' must name a job: {', '.join(sorted(JOBS))}")
    if job not in JOBS:
        raise ValueError(f"{path}: unknown job {job!r}; known jobs: {', '.join(sorted(JOBS))}")
    config: dict[str, Any] = {"job": job}
    for section in SECTIONS:
        values = raw.get(section) or {}
        if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
            raise ValueError(f"{path}: '{section}' must be a mapping of option names to values")
        config[section] = dict(values)
    return config


def _apply_override(config: dict[str, Any], override: str) -> None:
    """``SECTION.KEY=VALUE``, the value read by the one ``--set`` rule (scalars kept as text)."""
    target, sep, _ = override.partition("=")
    section, dot, key = target.partition(".")
    if not sep or not dot or not key or section not in SECTIONS:
        raise ValueError(f"--set expects args.KEY=VALUE or beam.KEY=VALUE, got {override!r}")
    try:
        _, value = parse_override(override)
    except ValueError as err:
        raise ValueError(f"--set {override}: {err}") from None
    config[section][key] = value


def expand_variables(values: dict[str, Any], source: str | Path) -> dict[str, Any]:
    """``values`` (nested mappings and lists) with every ``${VAR}`` replaced by its value.

    Args:
        values: a config mapping; keys name where a value is used (``beam.project``).
        source: the config file, for messages.

    Raises:
        ValueError: a malformed reference, or variables that are not set or empty (all of
            them in one message, each with the keys that use it).
    """
    missing: dict[str, list[str]] = {}

    def expand(value: Any, where: str) -> Any:
        if isinstance(value, str):
            return _VARIABLE.sub(lambda match: lookup(match.group(1), where), value)
        if isinstance(value, list):
            return [expand(item, where) for item in value]
        if isinstance(value, dict):
            return {
                key: expand(item, f"{where}.{key}" if where else str(key))
                for key, item in value.items()
            }
        return value

    def lookup(name: str, where: str) -> str:
        if not _VARIABLE_NAME.fullmatch(name):
            raise ValueError(f"{source}: {where}: malformed variable reference ${{{name}}}")
        value = os.environ.get(name)
        if not value:
            missing.setdefault(name, []).append(where)
            return ""
        return value

    expanded = expand(values, "")
    if missing:
        details = "; ".join(f"{name} (used by {', '.join(uses)})" for name, uses in missing.items())
        raise ValueError(f"{source}: environment variable not set or empty: {details}")
    return expanded


def _expand(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """Replace ``${VAR}`` in every section; report every missing variable at once."""
    sections = expand_variables({section: config[section] for section in SECTIONS}, path)
    return {"job": config["job"], **sections}
