"""Scoped API tokens: who a bearer token is, and what it may do.

Kinds (``spotfleet token create``, ``POST /v1/tokens``):

- ``admin``: everything, like the legacy ``api.token`` / ``SPOTFLEET_API_TOKEN``.
- ``tenant:<name>`` with scopes ``read`` and/or ``submit``: that tenant's jobs,
  logs, events and costs only; ``submit`` also submits and cancels them. A spec
  naming another tenant is a 403; another tenant's job is a 404.
- ``viewer``: reads everything, changes nothing.
- agent tokens: one per instance, minted at launch (``Store.instance_for_token``);
  they may call the agent routes for their own instance and nothing else.

Design choice: a token is ``sf_<id>_<secret>`` with 256 bits of secret; only
its SHA-256 is stored (a fast hash is enough for a high-entropy secret; a slow
KDF would only slow every request). The ``id`` is public so ``token list`` and
``token revoke`` can name a token without showing it. Lookup is by hash, then a
constant-time compare of the hashes (``hmac.compare_digest``).

401 means "who are you?" (no token, an unknown or revoked one); 403 means "you,
but not this" (a viewer submitting, an agent reading jobs, a tenant token
submitting for another tenant).
"""

from __future__ import annotations

import hmac
import re
import secrets
from datetime import datetime

from spotfleet.api.principal import ADMIN, MIN_TOKEN_LENGTH, Principal, PrincipalResolver, check_token_text
from spotfleet.errors import InvalidSpec
from spotfleet.store.store import Store, TokenRecord, hash_token

SCOPES = ("read", "submit")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def parse_kind(kind: str, scopes: list[str] | tuple[str, ...] | None = None) -> tuple[str, str | None, tuple[str, ...]]:
    """``admin`` | ``viewer`` | ``tenant:<name>`` (+ scopes) → (kind, tenant, scopes)."""
    if kind in ("admin", "viewer"):
        if scopes:
            raise InvalidSpec("scopes", f"scopes apply to tenant tokens only, not {kind}")
        return kind, None, ("read", "submit") if kind == "admin" else ("read",)
    if kind.startswith("tenant:"):
        tenant = kind.split(":", 1)[1]
        if not _TENANT.match(tenant):
            raise InvalidSpec("kind", f"invalid tenant name {tenant!r}: letters, digits, '.', '_', '-' (1-64)")
        chosen = tuple(dict.fromkeys(scopes or ("read", "submit")))
        bad = [s for s in chosen if s not in SCOPES]
        if bad:
            raise InvalidSpec("scopes", f"unknown scope {bad[0]!r}; use {' and/or '.join(SCOPES)}")
        return "tenant", tenant, chosen
    raise InvalidSpec("kind", f"unknown token kind {kind!r}; use admin, viewer or tenant:<name>")


def create_token(store: Store, *, kind: str, name: str = "", scopes: list[str] | None = None,
                 now: datetime) -> tuple[str, TokenRecord]:  # fmt: skip
    """Mint a token; returns (the secret token, shown once, and its record)."""
    k, tenant, chosen = parse_kind(kind, scopes)
    if len(name) > 200 or any(ord(c) < 32 for c in name):
        raise InvalidSpec("name", "a token name is at most 200 printable characters")
    token_id = secrets.token_hex(6)
    token = f"sf_{token_id}_{secrets.token_urlsafe(32)}"
    record = TokenRecord(id=token_id, name=name or kind, kind=k, tenant=tenant, scopes=chosen, created_at=now)
    store.add_token(record, hash_token(token))
    return token, record


def principal_of(record: TokenRecord) -> Principal:
    if record.kind == "admin":
        return ADMIN
    if record.kind == "viewer":
        return Principal(f"viewer:{record.id}", kind="viewer")
    submit = "submit" in record.scopes
    return Principal(f"tenant:{record.tenant}", tenant=record.tenant, kind="tenant", can_cancel=submit,
                     can_submit=submit, can_read="read" in record.scopes or submit)  # fmt: skip


def token_resolver(store: Store, *, legacy_token: str | None, open_without_token: bool) -> PrincipalResolver:
    """The service's resolver: the legacy admin token, scoped tokens, agent tokens.

    ``open_without_token``: a request carrying no token is the admin (a laptop on
    loopback with no token configured; ``spotfleet up`` warns). A token that is
    sent is always checked, so a tenant token stays a tenant token there too."""

    def resolve(token: str | None) -> Principal | None:
        if token is None:
            return ADMIN if open_without_token else None
        if not token.strip() or len(token) > 512:
            return None
        if legacy_token is not None and hmac.compare_digest(token.encode(), legacy_token.encode()):
            return ADMIN
        digest = hash_token(token)
        record = store.token_by_hash(digest)
        if record is not None:
            return principal_of(record)
        inst = store.instance_for_token(token)
        if inst is not None and inst.live:
            return Principal(f"agent:{inst.id}", kind="agent", instance_id=inst.id, can_read=False)
        return None

    return resolve


def users_only(resolve: PrincipalResolver) -> PrincipalResolver:
    """The dashboard's resolver: agent tokens open no page."""

    def inner(token: str | None) -> Principal | None:
        p = resolve(token)
        return None if p is not None and p.is_agent else p

    return inner


__all__ = [
    "MIN_TOKEN_LENGTH",
    "check_token_text",
    "create_token",
    "parse_kind",
    "principal_of",
    "token_resolver",
    "users_only",
]
