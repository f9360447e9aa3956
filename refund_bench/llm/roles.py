"""The three LLM roles: how each request is built and how each answer is parsed.

Every request is a system message (a versioned prompt file, ``prompts/<role>/vN.md``) plus one
user message that is a JSON document, so that untrusted complaint text is visibly data and never
instructions. Answers are constrained by a strict JSON schema (``response_format``) and parsed
here into typed results; anything else raises :class:`MalformedAnswer`.

The prompt version string (``"judge/v1"``) travels in events and in cache keys: change a prompt
by adding a new file and bumping the version, never by editing a released one.

This module does no I/O except reading prompt files in :func:`load_prompt`; it decides nothing
about money.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Final, Literal, Protocol, TypedDict, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from refund_bench.domain import Category, Ruling
from refund_bench.errors import RefundBenchError
from refund_bench.events import GrievanceExtracted

log = logging.getLogger(__name__)

EXTRACTOR_PROMPT_VERSION: Final = "extractor/v2"
JUDGE_PROMPT_VERSION: Final = "judge/v3"
SETTLER_PROMPT_VERSION: Final = "settler/v4"

EXTRACTION_SCHEMA_NAME: Final = "grievance_extraction"
JUDGE_SCHEMA_NAME: Final = "judge_ruling"
REPLY_SCHEMA_NAME: Final = "customer_reply"

_CATEGORIES: Final = [category.value for category in Category]
_RULINGS: Final = [ruling.value for ruling in Ruling]

EXTRACTION_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "grievances": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "category": {"type": "string", "enum": _CATEGORIES},
                    "span_start": {"type": "integer", "minimum": 0},
                    "span_end": {"type": "integer", "minimum": 0},
                    "item_name": {"type": ["string", "null"]},
                    "item_quantity": {"type": ["integer", "null"], "minimum": 1},
                },
                "required": [
                    "text",
                    "category",
                    "span_start",
                    "span_end",
                    "item_name",
                    "item_quantity",
                ],
                "additionalProperties": False,
            },
        }
    },
    "required": ["grievances"],
    "additionalProperties": False,
}
"""Strict schema of the extractor's answer (``grievance_extraction``)."""

JUDGE_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "ruling": {"type": "string", "enum": _RULINGS},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "evidence_cited": {"type": "array", "items": {"type": "string"}},
        "reasoning": {"type": "string"},
    },
    "required": ["ruling", "confidence", "evidence_cited", "reasoning"],
    "additionalProperties": False,
}
"""Strict schema of one judge's answer (``judge_ruling``)."""

REPLY_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {"reply": {"type": "string"}},
    "required": ["reply"],
    "additionalProperties": False,
}
"""Strict schema of the settler's answer (``customer_reply``)."""


class MalformedAnswer(RefundBenchError):  # noqa: N818 - named for the policy, like InvalidInput
    """The model's answer is not what the schema and the contract promise. Not transient.

    ``reason`` says what is wrong; ``raw`` is the answer as received, kept for audit;
    ``served_model`` and ``system_fingerprint`` what the endpoint's response named, when the
    completion was read that far. The caller decides the policy (e.g. dead-letter the record,
    or redraw once without caching).
    """

    def __init__(
        self,
        reason: str,
        raw: str,
        *,
        served_model: str | None = None,
        system_fingerprint: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw
        self.served_model = served_model
        self.system_fingerprint = system_fingerprint


# --------------------------------------------------------------------------- prompts

_VERSION_RE: Final = re.compile(r"^(?P<role>extractor|judge|settler)/(?P<version>v[0-9]+)$")


@dataclass(frozen=True)
class Prompt:
    """A system prompt and its version string (``"judge/v1"``)."""

    version: str
    text: str

    @property
    def sha256(self) -> str:
        """Hex sha256 of the prompt text, logged next to the version by :func:`load_prompt`."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def load_prompt(version: str) -> Prompt:
    """Read ``prompts/<role>/<vN>.md`` shipped with this package.

    Raises ``ValueError`` for a malformed version and ``FileNotFoundError`` for an unknown one.
    Load once at start-up and pass the :class:`Prompt` to the request builders.
    """
    match = _VERSION_RE.match(version)
    if match is None:
        raise ValueError(f"prompt version must look like 'judge/v1', got {version!r}")
    path = resources.files("refund_bench.llm").joinpath(
        "prompts", match["role"], f"{match['version']}.md"
    )
    prompt = Prompt(version=version, text=path.read_text(encoding="utf-8"))
    # What the events cannot say: the text this version names here. A released file is never
    # edited (tests/unit/test_prompt_files.py holds each one's digest).
    log.info("prompt %s: sha256 %s", version, prompt.sha256)
    return prompt


def _shipped_prompt_of(role: str) -> Callable[[str], str]:
    def check(version: str) -> str:
        if not version.startswith(f"{role}/"):
            raise ValueError(f"must be a {role} prompt ('{role}/vN'), got {version!r}")
        try:
            load_prompt(version)
        except FileNotFoundError:
            raise ValueError(f"no prompt {version!r} is shipped with this release") from None
        return version

    return check


ExtractorPromptVersion = Annotated[str, AfterValidator(_shipped_prompt_of("extractor"))]
"""A setting naming an extractor prompt this release ships (checked when settings load, so a
wrong one stops the stage at start, not on every complaint)."""
JudgePromptVersion = Annotated[str, AfterValidator(_shipped_prompt_of("judge"))]
"""A setting naming a judge prompt this release ships."""
SettlerPromptVersion = Annotated[str, AfterValidator(_shipped_prompt_of("settler"))]
"""A setting naming a settler prompt this release ships."""


# --------------------------------------------------------------------------- requests


class ChatMessage(TypedDict):
    """One chat message as sent to an OpenAI-compatible endpoint."""

    role: Literal["system", "user"]
    content: str


@dataclass(frozen=True)
class LlmRequest:
    """Everything a role sends: messages, the response schema's name and body, the prompt."""

    messages: tuple[ChatMessage, ...]
    schema_name: str
    schema: Mapping[str, Any]
    prompt_version: str

    @property
    def user_document(self) -> str:
        """The user message: the JSON document the model reads."""
        return self.messages[-1]["content"]

    def inputs_sha256(self) -> str:
        """Hex sha256 of the prompt version and the user document: what the answer depends on.

        Use it in cache keys (e.g. :func:`refund_bench.llm.cache.settler_cache_key`).
        """
        digest = hashlib.sha256(self.prompt_version.encode("utf-8"))
        digest.update(b"\0")
        digest.update(self.user_document.encode("utf-8"))
        return digest.hexdigest()


def _document(payload: object) -> str:
    """The JSON text of a user document: sorted keys, UTF-8 kept, so it is stable to hash."""
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _request(prompt: Prompt, payload: object, name: str, schema: Mapping[str, Any]) -> LlmRequest:
    return LlmRequest(
        messages=(
            {"role": "system", "content": prompt.text},
            {"role": "user", "content": _document(payload)},
        ),
        schema_name=name,
        schema=schema,
        prompt_version=prompt.version,
    )


class NamedQuantity(Protocol):
    """What the extractor is told of a line item (e.g. :class:`refund_bench.domain.LineItem`)."""

    @property
    def name(self) -> str: ...

    @property
    def quantity(self) -> int: ...


def _check_role(prompt: Prompt, role: str) -> None:
    if not prompt.version.startswith(f"{role}/"):
        raise ValueError(f"a {role} request needs a {role}/ prompt, got {prompt.version!r}")


def build_extractor_request(
    complaint_text: str, line_items: Iterable[NamedQuantity], *, prompt: Prompt
) -> LlmRequest:
    """The extractor's request: ``{"complaint_text", "line_items": [{"name", "quantity"}]}``.

    Prices are deliberately not sent: extraction must not be influenced by what money is at
    stake.
    """
    _check_role(prompt, "extractor")
    payload = {
        "complaint_text": complaint_text,
        "line_items": [{"name": item.name, "quantity": item.quantity} for item in line_items],
    }
    return _request(prompt, payload, EXTRACTION_SCHEMA_NAME, EXTRACTION_SCHEMA)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GrievanceForJudge(_Frozen):
    """The grievance a judge rules on (from ``grievance.extracted``)."""

    grievance_id: str
    category: Category
    text: str
    span_text: str | None = None
    """The complaint's own words the grievance was drawn from (``None`` for a grievance
    extracted before events carried them); ``text`` is the extractor's restatement."""
    item_name: str | None = None
    item_quantity: int | None = None

    @classmethod
    def of(cls, grievance: GrievanceExtracted, category: Category) -> GrievanceForJudge:
        """What a judge is shown of ``grievance`` (its category already checked)."""
        return cls(
            grievance_id=grievance.grievance_id,
            category=category,
            text=grievance.text,
            span_text=grievance.span_text,
            item_name=grievance.item_name,
            item_quantity=grievance.item_quantity,
        )


def build_judge_request(
    grievance: GrievanceForJudge, evidence: Mapping[str, Any], *, prompt: Prompt
) -> LlmRequest:
    """One judge's request: ``{"grievance": {...}, "evidence": <the snapshot dict>}``.

    Each seat gets the same request with no shared history; seats differ only by ``seed`` (and
    the temperature, which must be > 0 for judges), which the client sends.
    """
    _check_role(prompt, "judge")
    shown = grievance.model_dump(
        mode="json", exclude={"span_text"} if grievance.span_text is None else None
    )
    payload = {"grievance": shown, "evidence": evidence}
    return _request(prompt, payload, JUDGE_SCHEMA_NAME, JUDGE_SCHEMA)


class ResolvedForReply(_Frozen):
    """A decided grievance as the settler sees it; ``outcome`` is e.g. PAY, ZERO or REJECTED."""

    category: Category
    text: str
    outcome: str


class HeldForReply(_Frozen):
    """A grievance that goes to human review, as the settler sees it; ``category`` ``None``
    for the whole claim of a complaint a person reads before anything was judged (its
    extraction failed)."""

    category: Category | None
    text: str


def build_settler_request(
    complaint_text: str,
    approved_amount: str,
    resolved: Sequence[ResolvedForReply],
    held_for_review: Sequence[HeldForReply],
    *,
    prompt: Prompt,
    earlier_refund: bool = False,
) -> LlmRequest:
    """The settler's request. ``approved_amount`` is display text formatted by code ("INR 689");
    ``earlier_refund``: an earlier round of the dispute paid money (its amount is not given).

    The model only words the reply; the product's reply guard checks the result.
    """
    _check_role(prompt, "settler")
    payload = {
        "complaint_text": complaint_text,
        "approved_amount": approved_amount,
        "earlier_refund": earlier_refund,
        "resolved": [entry.model_dump(mode="json") for entry in resolved],
        "held_for_review": [entry.model_dump(mode="json") for entry in held_for_review],
    }
    return _request(prompt, payload, REPLY_SCHEMA_NAME, REPLY_SCHEMA)


# --------------------------------------------------------------------------- answers


class ExtractedGrievance(_Frozen):
    """One grievance as the extractor returned it (validated)."""

    text: str = Field(min_length=1)
    category: Category
    span_start: int = Field(ge=0)
    span_end: int = Field(ge=0)
    item_name: str | None
    item_quantity: int | None = Field(ge=1)

    @model_validator(mode="after")
    def _span_order(self) -> ExtractedGrievance:
        if self.span_end <= self.span_start:
            raise ValueError("span_end must be greater than span_start")
        return self


class Extraction(_Frozen):
    """The extractor's answer: the grievances in complaint order (possibly none)."""

    grievances: tuple[ExtractedGrievance, ...]


class JudgeAnswer(_Frozen):
    """One judge's answer, exactly as the model gave it (no code-side normalisation)."""

    ruling: Ruling
    confidence: float = Field(ge=0.0, le=1.0)
    evidence_cited: tuple[str, ...]
    reasoning: str


class CustomerReply(_Frozen):
    """The settler's reply text (not yet guarded)."""

    reply: str = Field(min_length=1)


def loads_answer(raw: str) -> object:
    """``json.loads(raw)``, refusing an answer whose strings cannot be sent on and stored.

    JSON may escape half of a surrogate pair on its own (``"\\ud83d"``, an emoji cut short);
    ``json`` accepts it, and every event carrying the string would then fail to encode. It may
    also escape a NUL character (``"\\u0000"``), which PostgreSQL text cannot store: the
    audit record of every event carrying it would fail. Raises ``ValueError`` for such an
    answer, as for text that is not JSON, and for one nested too deeply for Python to read
    (``RecursionError`` would otherwise stop the stage, on every redelivery of a cached answer).
    """
    try:
        data = json.loads(raw)
        if "\\ud" in raw or "\\uD" in raw:  # only an escape can produce a lone surrogate
            try:
                json.dumps(data, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError("the answer holds half of a surrogate pair") from exc
        if "\\u0000" in raw and _holds_nul(data):  # JSON strings hold a NUL only escaped
            raise ValueError("the answer holds a NUL character")
    except RecursionError as exc:
        raise ValueError("the answer is nested too deeply to read") from exc
    return data


def _holds_nul(data: object) -> bool:
    if isinstance(data, str):
        return "\x00" in data
    if isinstance(data, dict):
        return any(_holds_nul(key) or _holds_nul(value) for key, value in data.items())
    if isinstance(data, list):
        return any(_holds_nul(item) for item in data)
    return False


def _load(raw: str) -> object:
    try:
        return loads_answer(raw)
    except ValueError as exc:
        raise MalformedAnswer(f"answer is not JSON: {exc}", raw) from exc


_M = TypeVar("_M", bound=BaseModel)


def _validate(model: type[_M], raw: str) -> _M:
    data = _load(raw)
    try:
        return model.model_validate(data, strict=False)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '<root>'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)
        )
        raise MalformedAnswer(f"answer does not match {model.__name__}: {problems}", raw) from exc


def parse_extraction(
    raw: str,
    *,
    complaint_text: str | None = None,
    line_item_names: Iterable[str] | None = None,
) -> Extraction:
    """Parse and check the extractor's answer.

    With ``complaint_text``, every span must lie inside it. With ``line_item_names``, every
    ``item_name`` must name one of them (compared case-insensitively) and is returned in the
    order's spelling. Raises :class:`MalformedAnswer` otherwise.
    """
    extraction = _validate(Extraction, raw)
    names = {name.casefold(): name for name in line_item_names} if line_item_names else None
    checked: list[ExtractedGrievance] = []
    for index, grievance in enumerate(extraction.grievances):
        if complaint_text is not None and grievance.span_end > len(complaint_text):
            raise MalformedAnswer(
                f"grievances[{index}] span {grievance.span_start}..{grievance.span_end} lies "
                f"outside the complaint ({len(complaint_text)} characters)",
                raw,
            )
        if names is not None and grievance.item_name is not None:
            canonical = names.get(grievance.item_name.casefold())
            if canonical is None:
                raise MalformedAnswer(
                    f"grievances[{index}] names {grievance.item_name!r}, not a line item", raw
                )
            grievance = grievance.model_copy(update={"item_name": canonical})
        checked.append(grievance)
    return Extraction(grievances=tuple(checked))


def parse_judge_ruling(raw: str) -> JudgeAnswer:
    """Parse one judge's answer; raises :class:`MalformedAnswer` if it breaks the schema."""
    return _validate(JudgeAnswer, raw)


def parse_customer_reply(raw: str) -> CustomerReply:
    """Parse the settler's answer; raises :class:`MalformedAnswer` if it breaks the schema."""
    return _validate(CustomerReply, raw)
