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
operator; ``Throttled`` leaves it REQUESTED and no launch on that provider is
issued before the ``retry_after`` the cloud asked for.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import spotfleet
from spotfleet.controller.plan import Plan
from spotfleet.controller.step import StepState
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
from spotfleet.model.offering import Offering
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
    quotas: list[tuple[QuotaExceeded, Offering]] = field(default_factory=list)  # quota errors, and what hit them

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
        self._quota_keys: dict[str, set[str]] = {}  # provider → offering keys a quota error marked
        # called right before every cloud launch/terminate; raises ``Fenced`` when
        # this replica no longer leads (``Controller.lead_with``)
        self.before_cloud_call: Callable[[], None] = lambda: None
        self.throttled_until: dict[str, datetime] = {}  # provider → no launch before (Throttled.retry_after)
        # request id → the agent token its bootstrap carries, while the launch is unconfirmed
        self._tokens: dict[str, str] = {}

    def execute(self, plan: Plan) -> ExecutionResult:
        step = plan.step
        tokens: dict[str, str] = {}
        waiting = {i.request_id for i in plan.snapshot.instances.values() if i.state is I.REQUESTED}
        self._tokens = {r: t for r, t in self._tokens.items() if r in waiting}  # adopted or failed since
        for inst in step.new_instances.values():
            tokens[inst.id] = self._tokens[inst.request_id] = self.token_factory(inst.id)
        changes = step.finalize()
        changes.new_instances = [(inst, tokens[inst.id]) for inst in step.new_instances.values()]
        self.store.commit(changes, now=step.now)  # 1. intent first
        result = ExecutionResult()
        launches = {c.instance_id: c for c in plan.commands if isinstance(c, Launch)}
        for instance_id in plan.to_launch:  # 2.
            inst = plan.snapshot.instances[instance_id]
            hit = next((q for q, failed in result.quotas if q.covers(inst.offering, failed=failed)), None)
            if hit is not None:  # the same quota would refuse it: not even asked
                after = StepState(step.snapshot, step.settings)
                self._fail_launch(after, inst, f"not launched: quota exceeded earlier in this step ({hit})")
                self._tokens.pop(inst.request_id, None)
                self.store.commit(after.finalize(), now=step.now)
                continue
            quiet_until = self.throttled_until.get(inst.provider)
            if quiet_until is not None and step.now < quiet_until:
                continue  # the cloud asked us to wait (Throttled.retry_after): stays REQUESTED
            self._launch(step, inst, tokens.get(inst.id), result, launches.get(instance_id))
        for instance_id in plan.to_terminate:  # 3.
            self._terminate(step, plan.snapshot.instances[instance_id], result)
        for orphan in plan.orphans:
            provider = self.providers.get(orphan.provider)
            if provider is None:
                continue
            self.before_cloud_call()
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
            # A REQUESTED instance from an earlier step: re-issue the same request
            # (idempotent). Design choice: the request keeps the token it was first
            # sent with — a cloud that accepted it (answer lost, listing lagging)
            # returns the instance it already built, whose bootstrap carries that
            # token, so a new one would lock its agent out until boot_timeout
            # (issue 14). Only its hash is stored, so after a controller restart
            # (token no longer in memory) it is minted anew.
            token = self._tokens.get(inst.request_id)
            if token is None:
                token = self._tokens[inst.request_id] = self.token_factory(inst.id)
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
        self.before_cloud_call()
        try:
            made = provider.launch(request)
        except InsufficientCapacity as exc:
            result.capacity_errors += 1
            keys = [o.key for o in exc.offerings] or [inst.offering.key]
            for key in keys:
                after.mark_unavailable(key, step.now + step.settings.capacity_backoff, str(exc))
            self._fail_launch(after, inst, f"insufficient capacity: {exc}")
        except QuotaExceeded as exc:
            # Wait, never escalate: every offering the quota covers is marked unavailable
            # (a global quota: the whole provider) and the step does not re-plan, so the
            # jobs wait for the quota instead of climbing to bigger or pricier boxes
            # (issue 14). Released capacity lifts the marks early (``_terminate``).
            covered = [o for o in step.snapshot.offerings if exc.covers(o, failed=inst.offering)]
            quota_keys = {inst.offering.key, *(o.key for o in covered)}
            for key in sorted(quota_keys):
                after.mark_unavailable(key, step.now + step.settings.quota_backoff, f"quota ({exc.scope.value}): {exc}")
            self._quota_keys.setdefault(inst.provider, set()).update(quota_keys)
            result.quotas.append((exc, inst.offering))
            after.event("provider.quota", f"{inst.provider} quota exceeded ({exc.scope.value} scope): {len(quota_keys)} "
                        f"offering(s) wait until capacity is released or {step.settings.quota_backoff} pass: {exc}",
                        level="warning", instance=inst, scope=exc.scope.value)  # fmt: skip
            self._fail_launch(after, inst, f"quota exceeded ({exc.scope.value}): {exc}")
        except Throttled as exc:
            until = step.now + timedelta(seconds=max(exc.retry_after, 0.0))
            self.throttled_until[inst.provider] = until
            after.event("provider.throttled", f"launch of {inst.id} throttled; no launch on {inst.provider} "
                        f"before {until:%H:%M:%S} ({exc})", level="warning", instance=inst)  # fmt: skip
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
        if inst.state is not I.REQUESTED:
            self._tokens.pop(inst.request_id, None)  # settled: launched or failed
        self.store.commit(after.finalize(), now=step.now)

    def _fail_launch(self, after: StepState, inst: Instance, reason: str, *, permanent: bool = False) -> None:
        level = "error" if permanent else "warning"
        after.event("instance.launch_failed", f"{inst.id}: {reason}", level=level, instance=inst)
        after.lose_instance(inst, reason=reason)

    # ------------------------------------------------------------ terminate

    def _terminate(self, step: StepState, inst: Instance, result: ExecutionResult) -> None:
        provider = self.providers.get(inst.provider)
        after = StepState(step.snapshot, step.settings)
        if provider is None or inst.provider_id is None:
            after.instance_to(inst, I.TERMINATED, reason="nothing to terminate at the provider")
        else:
            self.before_cloud_call()
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
                for key in sorted(self._quota_keys.pop(inst.provider, ())):  # released: the quota may fit again
                    after.mark_unavailable(key, step.now, f"{inst.provider} released {inst.id}: quota retried")
        self.store.commit(after.finalize(), now=step.now)

    def _log(self, step: StepState, kind: str, message: str, *, level: str) -> None:
        after = StepState(step.snapshot, step.settings)
        after.event(kind, message, level=level)
        self.store.commit(after.finalize(), now=step.now)
