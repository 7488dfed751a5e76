"""Error mapping: any provider's failure as the rlm error it is, and whether to retry.

`normalize_error(exc, spec)` -> (`RateLimited` | `AuthError` | `ContextOverflow` |
`ModelError`, transient). The kind comes from the error's type (rlm.llm.inproc's
`ProviderError.kind`, or litellm's exception types when litellm is already imported:
read from `sys.modules`, never imported here), its status, or the usual provider
wordings; rate limits and throttling are checked before overflow ("too many tokens per
minute, please wait" is a rate limit). An auth error names the env var to set
(`key_env`). Key-like strings are masked out of provider messages.
"""

from __future__ import annotations

import re
import sys

from rlm.errors import AuthError, ContextOverflow, ModelError, RateLimited, RlmError
from rlm.llm import inproc
from rlm.llm.preflight import key_envs, provider_of

_OVERFLOW = re.compile(
    r"context[ _]length|maximum context|context window|too many tokens|prompt is too long"
    r"|input is too long|exceeds the context|reduce the length|token limit|too long for",
    re.I,
)
# rate limits and throttling: transient, and never an overflow whatever else they say
_RATE_LIMIT = re.compile(
    r"rate[ _-]?limit|too many requests|please wait|throttl|\b429\b|requests per minute"
    r"|tokens per minute|\bTPM\b|\bRPM\b",
    re.I,
)
_TRANSIENT = re.compile(r"overloaded|temporarily unavailable", re.I)
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{4})[A-Za-z0-9_\-*]{8,}|\b(AIza)[A-Za-z0-9_\-]{20,}")
# missing or rejected credentials, whatever status the provider wrapped them in (a
# missing OpenAI key arrives as a 500 "Missing credentials"): an auth error, never retried
_AUTH = re.compile(
    r"missing credentials|api[ _-]?key|no key is set|unauthori[sz]ed|invalid[ _]authentication"
    r"|incorrect api|authentication (failed|error)",
    re.I,
)


def _mask(text: str) -> str:
    return _KEYLIKE.sub(lambda m: (m.group(1) or m.group(2)) + "***", text)


def key_env(spec: str) -> str:
    """The env var holding the key for `spec`'s provider."""
    if spec.startswith("script:"):
        return "the provider's *_API_KEY (this auth error was scripted)"
    names = key_envs(spec)
    if names:
        return names[0]
    provider = provider_of(spec)
    return f"{provider.upper()}_API_KEY" if provider else "the provider's *_API_KEY"


def _kind(exc: Exception) -> str | None:
    """What kind of provider error `exc` is by its type (inproc.ProviderError.KINDS), or
    None. litellm's types are looked up only when litellm is already imported: when it is
    not, no error can be one of them, and a scripted run never pays for the import."""
    if isinstance(exc, inproc.ProviderError):
        return exc.kind
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return None
    for kind, names in (("rate_limit", ("RateLimitError",)),
                        ("auth", ("AuthenticationError",)),
                        ("overflow", ("ContextWindowExceededError",)),
                        ("server", ("InternalServerError", "ServiceUnavailableError",
                                    "Timeout", "APIConnectionError"))):
        types = tuple(t for t in (getattr(litellm, n, None) for n in names)
                      if isinstance(t, type))
        if types and isinstance(exc, types):
            return kind
    return None


def normalize_error(exc: Exception, spec: str) -> tuple[RlmError, bool]:
    """(the rlm error for `exc`, whether it is transient and worth a retry)."""
    inner = getattr(exc, "original_exception", None)
    if type(exc).__name__ == "MidStreamFallbackError" and isinstance(inner, Exception):
        exc = inner
    msg = _mask(" ".join(str(exc).split()))[:500]
    status = getattr(exc, "status_code", None)
    kind = _kind(exc)
    # rate limits first: their wording ("too many tokens", "token limit") looks like overflow
    if kind == "rate_limit" or status == 429 or _RATE_LIMIT.search(msg):
        return RateLimited(f"{spec}: rate limited by the provider ({msg})"), True
    if kind == "auth" or status in (401, 403) or _AUTH.search(msg):
        env = key_env(spec)
        return AuthError(f"{spec}: authentication failed ({msg}); set {env} to a valid key"), False
    if kind == "overflow" or _OVERFLOW.search(msg):
        return ContextOverflow(f"{spec}: the prompt does not fit the context window ({msg})"), False
    if (
        kind in ("server", "timeout")
        or (isinstance(status, int) and status >= 500)
        or _TRANSIENT.search(msg)
    ):
        return RateLimited(f"{spec}: transient provider error ({msg})"), True
    return ModelError(f"{spec}: model call failed ({type(exc).__name__}: {msg})"), False

