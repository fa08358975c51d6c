"""Act: persist a plan, then make the cloud calls it needs.

Order matters for crash safety (numbered as they happen):

1. write the step's decisions, including new instances as REQUESTED with their
   request ids, in one transaction;
2. launch every REQUESTED instance (idempotent per request id, so a retry after
   a crash or a timeout never buys twice) and record each answer at once;
3. terminate every TERMINATING instance, and any leaked instance carrying our
   cluster tag that the store does not know.

Provider errors become state, never exceptions out of the step:
``InsufficientCapacity`` marks exactly the failed offerings unavailable and
requeues the jobs that waited for them (the controller re-plans in the same
step); ``QuotaExceeded``/``PermanentError`` fail the instance and tell the
operator; ``Throttled`` leaves it REQUESTED for the next step.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import spotfleet
from spotfleet.controller.plan import Plan
from spotfleet.controller.step import StepState
from spotfleet.controller.sync import lose_instance
from spotfleet.errors import (
    InstanceNotFound,
    InsufficientCapacity,
    NotOwned,
    PermanentError,
    ProviderError,
    QuotaExceeded,
    Throttled,
)
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.snapshot import Launch
from spotfleet.providers.base import (
    TAG_CLUSTER,
    TAG_INSTANCE_ID,
    TAG_JOB_IDS,
    TAG_REQUEST_ID,
    AgentBootstrap,
    LaunchRequest,
    Provider,
)
from spotfleet.store.store import Store

log = logging.getLogger(__name__)
I = InstanceState  # noqa: E741


@dataclass(slots=True)
class ExecutionResult:
    launched: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    capacity_errors: int = 0

    @property
    def should_replan(self) -> bool:
        return self.capacity_errors > 0


def new_agent_token() -> str:
    """A per-instance agent secret. The ``sf_`` prefix keeps it a plain string
    everywhere it travels: never read as a command-line option (a raw
    url-safe token can start with ``-``) nor as a YAML number."""
    return f"sf_{secrets.token_urlsafe(32)}"


class Executor:
    def __init__(
        self,
        *,
        store: Store,
        providers: Mapping[str, Provider],
        cluster: str,
        controller_url: Callable[[], str],
        token_factory: Callable[[str], str] = lambda _instance_id: new_agent_token(),
    ) -> None:
        self.store = store
        self.providers = providers
        self.cluster = cluster
        self.controller_url = controller_url
        self.token_factory = token_factory

    def execute(self, plan: Plan) -> ExecutionResult:
        step = plan.step
        tokens: dict[str, str] = {}
        for inst in step.new_instances.values():
            tokens[inst.id] = self.token_factory(inst.id)
        changes = step.finalize()
        changes.new_instances = [(inst, tokens[inst.id]) for inst in step.new_instances.values()]
        self.store.commit(changes, now=step.now)  # 1. intent first
        result = ExecutionResult()
        launches = {c.instance_id: c for c in plan.commands if isinstance(c, Launch)}
        for instance_id in plan.to_launch:  # 2.
            inst = plan.snapshot.instances[instance_id]
            self._launch(step, inst, tokens.get(inst.id), result, launches.get(instance_id))
        for instance_id in plan.to_terminate:  # 3.
            self._terminate(step, plan.snapshot.instances[instance_id], result)
        for orphan in plan.orphans:
            provider = self.providers.get(orphan.provider)
            if provider is None:
                continue
            try:
                provider.terminate([orphan.provider_id], request_id=f"orphan-{orphan.provider_id}")
                self._log(step, "instance.orphan_terminated",
                          f"terminated leaked {orphan.provider}:{orphan.provider_id} (tagged for this cluster, unknown to the store)",
                          level="warning")  # fmt: skip
            except ProviderError as exc:
                self._log(step, "instance.orphan_error", f"could not terminate leaked {orphan.provider_id}: {exc}",
                          level="error")  # fmt: skip
        return result

    # ------------------------------------------------------------ launch

    def _launch(
        self, step: StepState, inst: Instance, token: str | None, result: ExecutionResult, command: Launch | None
    ) -> None:
        provider = self.providers.get(inst.provider)
        after = StepState(step.snapshot, step.settings)
        if provider is None:
            self._fail_launch(after, inst, f"provider {inst.provider!r} is not configured", permanent=True)
            self.store.commit(after.finalize(), now=step.now)
            return
        if token is None:
            # a REQUESTED instance from an earlier step: re-issue the same request
            # (idempotent); the agent token must be re-minted since only its hash is stored
            token = self.token_factory(inst.id)
            self.store.rotate_agent_token(inst.id, token)
        jobs = ",".join(j.id for j in step.snapshot.jobs_on(inst.id))
        request = LaunchRequest(
            request_id=inst.request_id,
            offering=inst.offering,
            bootstrap=AgentBootstrap(
                controller_url=self.controller_url(),
                agent_token=token,
                spotfleet_version=spotfleet.__version__,
                cluster=self.cluster,
            ),
            tags={
                TAG_CLUSTER: self.cluster,
                TAG_REQUEST_ID: inst.request_id,
                TAG_INSTANCE_ID: inst.id,
                TAG_JOB_IDS: jobs[:250],
            },
            alternatives=command.alternatives if command else (),
            placement_group=command.placement_group if command else None,
        )
        inst.launch_attempts += 1
        after.touch_instance(inst)
        try:
            made = provider.launch(request)
        except InsufficientCapacity as exc:
            result.capacity_errors += 1
            keys = [o.key for o in exc.offerings] or [inst.offering.key]
            for key in keys:
                after.mark_unavailable(key, step.now + step.settings.capacity_backoff, str(exc))
            self._fail_launch(after, inst, f"insufficient capacity: {exc}")
        except QuotaExceeded as exc:
            after.mark_unavailable(inst.offering.key, step.now + step.settings.capacity_backoff * 3, str(exc))
            result.capacity_errors += 1
            self._fail_launch(after, inst, f"quota exceeded: {exc}", permanent=True)
        except Throttled as exc:
            after.event("provider.throttled", f"launch of {inst.id} throttled; retrying next step ({exc})",
                        level="warning", instance=inst)  # fmt: skip
        except PermanentError as exc:
            after.mark_unavailable(inst.offering.key, step.now + step.settings.capacity_backoff * 6, str(exc))
            result.capacity_errors += 1
            self._fail_launch(after, inst, f"permanent error: {exc}", permanent=True)
        except ProviderError as exc:
            after.event("provider.error", f"launch of {inst.id} failed: {exc}", level="error", instance=inst)
            if inst.launch_attempts >= step.settings.max_launch_attempts:
                self._fail_launch(after, inst, f"gave up after {inst.launch_attempts} attempts: {exc}")
        else:
            if not made:
                result.capacity_errors += 1
                after.mark_unavailable(
                    inst.offering.key, step.now + step.settings.capacity_backoff, "no instance returned"
                )
                self._fail_launch(after, inst, "the provider returned no instance")
            else:
                cloud = made[0]
                inst.provider_id = cloud.provider_id
                inst.launched_at = cloud.launched_at or step.now
                inst.address = cloud.address
                after.instance_to(inst, I.PROVISIONING, reason=f"launched as {cloud.provider_id}")
                result.launched.append(inst.id)
        self.store.commit(after.finalize(), now=step.now)

    def _fail_launch(self, after: StepState, inst: Instance, reason: str, *, permanent: bool = False) -> None:
        level = "error" if permanent else "warning"
        after.event("instance.launch_failed", f"{inst.id}: {reason}", level=level, instance=inst)
        lose_instance(after, inst, reason=reason)

    # ------------------------------------------------------------ terminate

    def _terminate(self, step: StepState, inst: Instance, result: ExecutionResult) -> None:
        provider = self.providers.get(inst.provider)
        after = StepState(step.snapshot, step.settings)
        if provider is None or inst.provider_id is None:
            after.instance_to(inst, I.TERMINATED, reason="nothing to terminate at the provider")
        else:
            try:
                provider.terminate([inst.provider_id], request_id=f"terminate-{inst.id}")
            except InstanceNotFound:
                after.instance_to(inst, I.TERMINATED, reason="already gone at the provider")
            except NotOwned as exc:
                after.instance_to(inst, I.TERMINATED, reason=f"refused: {exc}")
            except ProviderError as exc:
                after.event("provider.error", f"terminate of {inst.id} failed, will retry: {exc}",
                            level="warning", instance=inst)  # fmt: skip
            else:
                result.terminated.append(inst.id)
                after.instance_to(inst, I.TERMINATED, reason="terminated")
        self.store.commit(after.finalize(), now=step.now)

    def _log(self, step: StepState, kind: str, message: str, *, level: str) -> None:
        after = StepState(step.snapshot, step.settings)
        after.event(kind, message, level=level)
        self.store.commit(after.finalize(), now=step.now)
