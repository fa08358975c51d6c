"""The environment a job starts with: clean, never the agent's own.

A job gets a minimal base (``BASE_VARIABLES`` copied from the agent's
environment when set), then its spec's ``env``, then the ``SPOTFLEET_*`` job
variables (``spotfleet.checkpoint.job_environment``, the one place they are
defined) and its GPU grant. Nothing else of the agent's or controller's
environment reaches it: before this, a local-provider job printed
``SPOTFLEET_API_TOKEN`` and ``SPOTFLEET_DATABASE=postgresql://…:<password>@…``.

Design choice: an allow-list, not a deny-list of secret-looking names. A
deny-list misses the next credential (``AWS_SESSION_TOKEN``,
``GOOGLE_APPLICATION_CREDENTIALS``, a vendor's ``*_KEY``); a job that needs a
variable names it in its spec.
"""

from __future__ import annotations

from collections.abc import Mapping

BASE_VARIABLES = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
    "TMPDIR", "TEMP", "TMP", "TERM", "LD_LIBRARY_PATH", "CUDA_HOME", "NVIDIA_DRIVER_CAPABILITIES",
)  # fmt: skip
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base_environment(agent_env: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of the agent's environment (PATH always set)."""
    env = {k: agent_env[k] for k in BASE_VARIABLES if k in agent_env}
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("LANG", "C.UTF-8")
    return env
