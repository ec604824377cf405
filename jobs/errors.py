"""Errors of job runs (as opposed to bad options, which raise ValueError and friends)."""


class JobFailedError(RuntimeError):
    """The job ran but its result is not acceptable (rows lost, error rate); no manifest."""
