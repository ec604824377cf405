"""What ``finetune.run`` reports: :class:`FinetuneSummary` after training, or
:class:`PrintedConfig` for ``--print-config``, which trains nothing. Each has ``line()``, what
``sbert finetune`` prints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FinetuneSummary:
    """What a finished fine-tuning run reports.

    Under torchrun only the first process evaluates, saves and reports: on the others
    ``main_process`` is false, ``test_metrics`` empty and :meth:`line` empty.
    """

    output: str
    steps: int
    seconds: float
    examples_per_second: float
    dev_metric: str | None
    dev_score: float | None
    test_metrics: dict
    resumed_from: int | None
    main_process: bool = True

    def line(self) -> str:
        """One-line human summary (empty on a process other than the first)."""
        if not self.main_process:
            return ""
        done = self.steps - (self.resumed_from or 0)
        parts = [f"trained {done} steps in {self.seconds:.1f}s"]
        parts[0] += f" ({self.examples_per_second:.1f} examples/s)"
        if self.resumed_from is not None:
            parts.append(f"resumed from step {self.resumed_from}, ended at step {self.steps}")
        if self.dev_score is not None:
            parts.append(f"best dev {self.dev_metric} {self.dev_score:.2f}")
        for name, scores in self.test_metrics.items():
            before = scores.get("before")
            # F1 and AP changes of 0.01 matter.
            digits = 4 if scores["metric"] in ("pair_f1", "ap", "f1") else 2
            change = f"{before:.{digits}f} -> " if before is not None else ""
            after = f"{scores['after']:.{digits}f}"
            parts.append(f"test {name} {scores['metric']} {change}{after}")
        return "; ".join(parts) + f"; saved to {self.output}"


@dataclass(frozen=True)
class PrintedConfig:
    """The resolved config of a ``--print-config`` run, which trains nothing.

    Attributes:
        config: the resolved config as plain YAML values.
        yaml: the same as a YAML document.
    """

    config: dict
    yaml: str

    def line(self) -> str:
        """The YAML document (several lines; the CLI prints it as the command's output)."""
        return self.yaml.rstrip("\n")
