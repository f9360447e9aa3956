"""URLs as they may be printed: without the credentials a URL can carry.

A base URL may hold a user name and password (``https://user:password@host/v1``) or a key in
its query (``?key=...``). Anything that prints or logs a URL shows it through
:func:`printable_url`, and text that may quote one (an HTTP library's error message) through
:func:`without_credentials`.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

_URL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
"""A URL quoted in text: a scheme, ``://`` and everything up to a space or a quote."""

UNPRINTABLE: Final = "<URL>"
"""What is shown of text that does not parse as a URL with a host."""


def printable_url(url: str) -> str:
    """``url`` fit to print or log: its scheme, host, port and path, never its user name,
    password, query or fragment (any of them may carry a credential). Text that does not parse
    as a URL with a host is shown as :data:`UNPRINTABLE`, whatever it holds."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return UNPRINTABLE
    host = parts.netloc.rpartition("@")[2]  # the userinfo ends at the last "@"
    if not parts.scheme or not host:
        return UNPRINTABLE
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def printable_urls(urls: str) -> str:
    """A comma-separated list of URLs (``JUDGE_BASE_URLS``), each entry as
    :func:`printable_url` shows it; an empty entry stays empty."""
    return ",".join(printable_url(url) if url.strip() else url for url in urls.split(","))


def without_credentials(text: str) -> str:
    """``text`` with every URL quoted in it (``scheme://...``) as :func:`printable_url` shows
    it."""
    return _URL.sub(lambda match: printable_url(match.group(0)), text)


def base_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an LLM endpoint's base URL, or ``None``: it must be ``http`` or
    ``https`` with a host and a valid port, and carry no user name, password, query or fragment
    (the HTTP client turns a user name into an ``Authorization`` header that clashes with the
    key's, and the openai client appends its paths after a query). The reason never quotes the
    URL, which may hold a credential."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return "is not a URL with a valid host and port"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return "must be an http or https URL with a host"
    if "@" in parts.netloc:
        return "must carry no user name or password: give the endpoint's key as its API key setting"
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        return "must carry no query or fragment: give the endpoint's key as its API key setting"
    return None
