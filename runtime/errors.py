"""Errors the runtime raises on purpose.

Every problem with user input (a checkpoint folder, a command-line value) becomes a
`CheckpointError` or `UsageError` whose message names the file or value and says what
to do. The CLI prints that message as one line and exits non-zero; the GUI shows it.
"""


class ElasticError(Exception):
    """Base class: an expected failure with a message meant for the user."""


class CheckpointError(ElasticError):
    """A checkpoint folder that cannot be used as it is."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UsageError(ElasticError):
    """A request the engine cannot honour (unknown submodel, bad token id, ...)."""
