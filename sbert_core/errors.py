"""Exceptions raised by the SBERT core, each naming what is wrong and where."""


class ModelLoadError(RuntimeError):
    """A model could not be found, resolved or read; the message names the file or id."""


class DataFileError(ValueError):
    """A data file is missing, unreadable or lacks a column; the message says file, row, column."""
