"""Reviewer passwords: PBKDF2-HMAC-SHA256 (stdlib) with a per-user random salt.

A hash reads ``pbkdf2-sha256.<iterations>.<salt>.<digest>`` (unpadded base64url), so it holds no
character a shell or the ``REVIEWERS`` list (``name:hash,name:hash``) treats specially. The
iteration count travels in the hash: raising the default later keeps old hashes valid.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import re
import secrets
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

SCHEME = "pbkdf2-sha256"
DEFAULT_ITERATIONS = 600_000
"""OWASP's 2023 recommendation for PBKDF2-HMAC-SHA256."""
MIN_ITERATIONS = 100_000
"""The fewest iterations a stored hash may have: a weaker one is refused at start."""
Check = Callable[[str, str], Awaitable[bool]]
"""A password check in a slot taken for it (:meth:`PasswordChecks.slot`): name, password."""
_USERNAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class PasswordHash:
    iterations: int
    salt: bytes
    digest: bytes

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        """Parse a stored hash; raises ``ValueError`` naming what is wrong (never the hash)."""
        parts = text.strip().split(".")
        if len(parts) != 4 or parts[0] != SCHEME:
            raise ValueError(f"not a {SCHEME} hash (expected {SCHEME}.<iter>.<salt>.<digest>)")
        try:
            iterations = int(parts[1])
            salt, digest = _unb64(parts[2]), _unb64(parts[3])
        except ValueError:
            # from None: the parsing error may quote the hash's fields (int() does).
            raise ValueError(f"malformed {SCHEME} hash") from None
        if len(salt) < 8 or len(digest) != 32:
            raise ValueError(f"malformed {SCHEME} hash")
        if iterations < MIN_ITERATIONS:
            raise ValueError(
                f"{SCHEME} hash with {iterations} iterations (at least {MIN_ITERATIONS}):"
                " hash the password again with `python -m services.api hash-password`"
            )
        return cls(iterations, salt, digest)

    def __str__(self) -> str:
        return f"{SCHEME}.{self.iterations}.{_b64(self.salt)}.{_b64(self.digest)}"

    def matches(self, password: str) -> bool:
        """Constant-time comparison of ``password``'s derived key with the stored one."""
        candidate = hashlib.pbkdf2_hmac("sha256", password.encode(), self.salt, self.iterations)
        return hmac.compare_digest(candidate, self.digest)


def hash_password(password: str, *, iterations: int = DEFAULT_ITERATIONS) -> str:
    """A new hash of ``password`` with a fresh 16-byte salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return str(PasswordHash(iterations, salt, digest))


def parse_reviewers(spec: str) -> dict[str, PasswordHash]:
    """Parse ``REVIEWERS`` (``alice:<hash>,bob:<hash>``); raises ``ValueError`` on bad input.

    An error names the entry by its position (1-based, blank entries counted), and by its user
    name only once the text before its colon is a valid one: never the entry as given, which
    may hold a hash (or a password) when it is mistyped.
    """
    reviewers: dict[str, PasswordHash] = {}
    for position, entry in enumerate((e.strip() for e in spec.split(",")), start=1):
        if not entry:
            continue
        name, sep, hashed = entry.partition(":")
        if not sep or not _USERNAME.fullmatch(name):
            # Not named: without a valid name before a colon, any of the entry may be a hash.
            raise ValueError(
                f"REVIEWERS entry {position} is not name:hash"
                " (a user name of letters, digits and _.@-, a colon, then the hash)"
            )
        if name in reviewers:
            raise ValueError(f"REVIEWERS entry {position}: reviewer {name!r} listed twice")
        alike = next((other for other in reviewers if other.casefold() == name.casefold()), None)
        if alike is not None:
            # The desk counts failed sign-ins by the name case-folded: two such names would
            # share one count, and one reviewer's sign-in would clear the other's.
            raise ValueError(
                f"REVIEWERS entry {position}: reviewer {name!r} differs from {alike!r} only in"
                " case; give each reviewer a name of their own"
            )
        try:
            reviewers[name] = PasswordHash.parse(hashed)
        except ValueError as exc:
            raise ValueError(f"REVIEWERS entry {position} ({name!r}): {exc}") from exc
    return reviewers


def _credential_mark(stored: PasswordHash) -> str:
    mark = hashlib.sha256(b"refund-bench credential mark v1\x00" + stored.salt + stored.digest)
    return _b64(mark.digest()[:16])


class ReviewerDirectory:
    """Who may sign in to the review desk."""

    def __init__(self, reviewers: Mapping[str, PasswordHash]) -> None:
        self._reviewers = dict(reviewers)
        self._marks = {name: _credential_mark(stored) for name, stored in self._reviewers.items()}
        self._most = max((h.iterations for h in self._reviewers.values()), default=0)
        self._decoy = PasswordHash(self._most or DEFAULT_ITERATIONS, b"decoy-salt-0000", bytes(32))

    def __contains__(self, name: object) -> bool:
        return name in self._reviewers

    def credential_mark(self, name: str) -> str | None:
        """A mark of ``name``'s stored hash, for a session to carry (``None``: no such
        reviewer). A new hash (a changed password) changes it, so that the sessions signed in
        with the old one end. It tells nothing of the password: it is a digest of the salted
        key, and the salt is not in it."""
        return self._marks.get(name)

    def __len__(self) -> int:
        return len(self._reviewers)

    def verify(self, name: str, password: str) -> bool:
        """True when ``name`` is a reviewer and ``password`` is theirs.

        Every call costs the key derivations of the directory's strongest hash, whoever is
        named: an unknown name (a decoy hash) and a reviewer whose hash has fewer iterations
        (derivations made up afterwards) alike, so timing tells neither which names exist nor
        whose hash is older. CPU-heavy: call it off the event loop.
        """
        stored = self._reviewers.get(name, self._decoy)
        matched = stored.matches(password)
        if stored.iterations < self._most:
            hashlib.pbkdf2_hmac(
                "sha256", password.encode(), stored.salt, self._most - stored.iterations
            )
        return matched and stored is not self._decoy


class PasswordChecks:
    """:meth:`ReviewerDirectory.verify` on threads of its own, at most ``threads`` at a time
    and ``waiting`` more queued; a check beyond that is refused at once.

    The per-user-name limit cannot count a flood of sign-ins under ever new names, and every
    check costs the full key derivations. Bounded here, such a flood costs these threads'
    CPU and refused sign-ins, never the default thread pool the rest of the API (its Kafka
    readiness check) runs on. A slot is freed when its check ends, not when its caller gives up:
    a client that disconnects cannot queue more derivations than the bound.
    """

    def __init__(self, directory: ReviewerDirectory, *, threads: int = 1, waiting: int = 8) -> None:
        if threads < 1 or waiting < 0:
            raise ValueError("threads must be at least 1 and waiting at least 0")
        self._directory = directory
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="password-check")
        self._limit = threads + waiting
        self._taken = 0
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        """True while a new check would be refused."""
        with self._lock:
            return self._taken >= self._limit

    async def verify(self, name: str, password: str) -> bool | None:
        """The directory's answer, or ``None`` when every slot is taken (nothing was checked)."""
        with self.slot() as check:
            return None if check is None else await check(name, password)

    @contextlib.contextmanager
    def slot(self) -> Iterator[Check | None]:
        """A slot taken for one check, held through the block: ``None`` when every slot is
        taken, else the check to run in it, once. A slot whose check never started is freed
        when the block ends; one whose check started, when the check ends. So a caller can
        take its slot before it does what only a check may follow (counting the attempt)."""
        with self._lock:
            taken = self._taken < self._limit
            if taken:
                self._taken += 1
        if not taken:
            yield None
            return
        started = False

        async def check(name: str, password: str) -> bool:
            nonlocal started
            if started:
                raise RuntimeError("one check per slot")
            future = self._executor.submit(self._directory.verify, name, password)
            started = True
            future.add_done_callback(lambda _: self._free())
            return await asyncio.wrap_future(future)

        try:
            yield check
        finally:
            if not started:
                self._free()

    def _free(self) -> None:
        with self._lock:
            self._taken -= 1

    def close(self) -> None:
        """Drop queued checks and let running ones finish on their own."""
        self._executor.shutdown(wait=False, cancel_futures=True)
