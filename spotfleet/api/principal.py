"""Who is asking: the one seam between a bearer token and what it may see and do.

Every dashboard page (and the API's token check) asks a ``PrincipalResolver``
to turn the request's token into a ``Principal``, and filters its data through
that principal: the jobs, events, instances and costs of other tenants are not
shown, and a job of another tenant answers 404 — not 403, which would confirm
it exists.

Design choice: a resolver is a plain function ``token | None → Principal | None``
(``None``: not let in). Today there is one optional admin token
(``single_token``, the legacy ``SPOTFLEET_API_TOKEN``). Scoped tokens
(``admin``, ``tenant:<name>`` with submit/read, ``viewer``) and per-instance
agent tokens come from ``spotfleet.api.auth.token_resolver``, which the service
passes to ``create_app(..., principals=...)``; nothing downstream looks at tokens.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """What one token may see and do.

    ``tenant=None`` sees every tenant (an admin or a fleet-wide viewer); a
    tenant principal sees its own jobs, their instances, events and costs, and
    no idle capacity (idle belongs to the fleet, not to a tenant).
    """

    name: str
    tenant: str | None = None
    can_cancel: bool = False  # cancel jobs it can see
    can_interrupt: bool = False  # inject reclaim notices (operators only)
    can_submit: bool = False  # submit jobs (a tenant principal: for its own tenant only)
    can_read: bool = True  # list and read what it sees
    kind: str = "viewer"  # admin | tenant | viewer | agent (spotfleet.api.auth)
    instance_id: str | None = None  # an agent's own instance

    @property
    def is_admin(self) -> bool:
        return self.kind == "admin"

    @property
    def is_agent(self) -> bool:
        return self.kind == "agent"

    @property
    def all_tenants(self) -> bool:
        return self.tenant is None

    def sees(self, tenant: str) -> bool:
        return self.tenant is None or self.tenant == tenant


ADMIN = Principal("admin", can_cancel=True, can_interrupt=True, can_submit=True, kind="admin")

PrincipalResolver = Callable[[str | None], Principal | None]

MIN_TOKEN_LENGTH = 16


def check_token_text(token: str, *, field: str = "api.token") -> str:
    """The configured legacy token, refused when blank or too short to resist guessing."""
    if not token.strip():
        raise _invalid(field, "the API token is empty or whitespace: set a real token or unset it")
    if token != token.strip() or any(ord(c) < 33 or ord(c) > 126 for c in token):
        raise _invalid(field, "the API token must be printable ASCII without spaces")
    if len(token) < MIN_TOKEN_LENGTH:
        raise _invalid(field, f"the API token is {len(token)} characters; use at least {MIN_TOKEN_LENGTH} "
                          "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")  # fmt: skip
    return token


def _invalid(field: str, message: str) -> Exception:
    from spotfleet.errors import InvalidSpec

    return InvalidSpec(field, message)


def single_token(api_token: str | None) -> PrincipalResolver:
    """Today's model: with no token configured (loopback only, see ``ApiConfig``)
    everyone is the admin; otherwise the one token is, and nothing else is."""
    if api_token is None:
        return lambda _token: ADMIN

    def resolve(token: str | None) -> Principal | None:
        if token is None or not hmac.compare_digest(token.encode(), api_token.encode()):
            return None
        return ADMIN

    return resolve


def open_access(resolve: PrincipalResolver) -> bool:
    """True when a request without a token is let in (no login form needed)."""
    return resolve(None) is not None
