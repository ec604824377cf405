"""An argparse mix-in that records the flags and actions it is given (argparse keeps its own
list private), for close-match hints, config checks and a command's switch flags. Beam-free."""

from __future__ import annotations

import argparse


class FlagRecording:
    """Mixed into an ``argparse.ArgumentParser`` subclass: :attr:`flags` lists every shown
    ``--flag`` in the order added, :attr:`actions` maps each ``--flag`` to its action."""

    def __init__(self, *args, **kwargs) -> None:
        self.flags: list[str] = []
        self.actions: dict[str, argparse.Action] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        """``add_argument``, recording the action's flags."""
        return self._record(super().add_argument(*args, **kwargs))

    def add_argument_group(self, *args, **kwargs):
        """``add_argument_group``; the group's flags are recorded here too."""
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument
        group.add_argument = lambda *a, **k: self._record(add(*a, **k))
        return group

    def _record(self, action: argparse.Action) -> argparse.Action:
        long_flags = [flag for flag in action.option_strings if flag.startswith("--")]
        self.actions.update(dict.fromkeys(long_flags, action))
        if action.help != argparse.SUPPRESS:
            self.flags += long_flags
        return action
