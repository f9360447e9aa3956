"""The one error of the stand-in's rules: a request they cannot answer."""

from __future__ import annotations


class RuleError(Exception):
    """The request cannot be answered: the server turns this into an HTTP 400 with ``message``
    and, when a request setting (not the messages) is at fault, that setting's name as the
    error's ``param``, as OpenAI does."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
