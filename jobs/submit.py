"""``sbert submit``: run a job from a YAML config (the way to reach Dataflow, Spark and Flink).

    sbert submit deploy/dataflow/embed-gpu.yaml [--set args.output=gs://b/out] [--dry-run]

A config names the job (a stage that runs Beam pipelines), its options and Beam's pipeline
options::

    job: embed
    args:                          # the stage's Options, spelled as on its command line
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
Every option is checked by the stage's own ``Options`` and by Beam's own parser, so a typo or a
bad value fails here instead of being dropped with a warning by Beam. ``--set
SECTION.KEY=VALUE`` overrides a value before the variables are expanded; VALUE
``true``/``false`` switches a flag, ``null`` removes the option, ``[a, b]`` gives a list,
anything else stays a string.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sbert_pipeline.jobs.options_cli import options_flags
from sbert_pipeline.jobs.parsers.submit import build_parser
from sbert_pipeline.jobs.stage_cli import runs_pipelines, stage_package
from sbert_pipeline.stage_api.beam_options import beam_parser
from sbert_pipeline.stage_api.options import BEAM_FIELD, options_from_mapping

from sbert_core.config import load_yaml, parse_override

# The stages a config may name: those that run Beam pipelines.
JOBS = ("cluster", "embed", "index", "pairs")
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


def job_options(config: Mapping[str, Any]) -> Any:
    """The stage's ``Options`` from ``config["args"]`` (flag spellings: ``keep-text`` is
    ``keep_text``), checked by the stage itself; Beam options are added when it runs.

    Raises:
        ValueError: an unknown option, a missing required one or a refused value, naming
            ``args.KEY``.
    """
    options_type = stage_package(config["job"]).Options
    args = {str(key).replace("-", "_"): value for key, value in config["args"].items()}
    if BEAM_FIELD in args:
        raise ValueError(f"args.{BEAM_FIELD}: put Beam's options under beam:")
    return options_from_mapping(options_type, args, "args")


def job_argv(config: Mapping[str, Any]) -> list[str]:
    """The stage's own options from ``config["args"]`` as its command line, once checked."""
    job_options(config)
    options_type = stage_package(config["job"]).Options
    return options_flags(options_type, config["args"])


def beam_argv(config: Mapping[str, Any]) -> list[str]:
    """Beam pipeline options from ``config["beam"]``, checked against Beam's own parser.

    None leaves an option out, ``true``/``false`` switch an on/off option (``false`` is Beam's
    ``--no_`` form where it has one), a list repeats the flag (Beam's list options
    accumulate), a mapping is JSON, anything else is its text.

    Raises:
        ValueError: an unknown option (with the closest name) or a value Beam refuses, naming
            ``beam.KEY``.
    """
    # The runner's own options (Dask's, registered when its module loads) are known too.
    runner = config["beam"].get("runner")
    parser = beam_parser([f"--runner={runner}"] if isinstance(runner, str) else [])
    argv: list[str] = []
    for key, value in config["beam"].items():
        argv += _beam_flags(parser, str(key), value)
    parser.exit_on_error = False
    try:
        parser.parse_known_args(argv)
    except argparse.ArgumentError as err:
        raise ValueError(f"beam: {err}") from None
    return argv


def _beam_flags(parser: Any, key: str, value: Any) -> list[str]:
    """One ``beam:`` entry as Beam's flags."""
    import difflib

    flag = f"--{key}"
    action = parser.actions.get(flag)
    if action is None:
        close = difflib.get_close_matches(flag, list(parser.actions), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"beam.{key}: unknown option {flag}{hint}")
    switch = action.nargs == 0
    if value is None:
        return []
    if isinstance(value, bool):
        if not switch:
            raise ValueError(f"beam.{key} takes a value, not {str(value).lower()}")
        off = f"--no_{key}"
        return [flag] if value else ([off] if off in parser.actions else [])
    if switch:
        raise ValueError(f"beam.{key} is an on/off option: write true or false, not {value!r}")
    if isinstance(value, dict):
        return [f"{flag}={json.dumps(value)}"]
    if isinstance(value, list | tuple):
        return [f"{flag}={_scalar(key, item)}" for item in value]
    return [f"{flag}={_scalar(key, value)}"]


def _scalar(key: str, value: Any) -> str:
    if isinstance(value, list | tuple | dict):
        raise ValueError(f"beam.{key}: nested lists and mappings are not supported")
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_to_argv(config: Mapping[str, Any]) -> list[str]:
    """The stage's command line for ``config``: its options first, then Beam options.

    Example:
        >>> config_to_argv({"job": "embed", "args": {"input": "in/*.txt", "output": "out"},
        ...                 "beam": {"runner": "DataflowRunner"}})
        ['--input=in/*.txt', '--output=out', '--runner=DataflowRunner']
    """
    return job_argv(config) + beam_argv(config)


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
    options = job_options(config).replace(**{BEAM_FIELD: tuple(beam_argv(config))})
    result = stage_package(config["job"]).run(options)
    print(result.line())
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
    if job not in JOBS or not runs_pipelines(job):
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
