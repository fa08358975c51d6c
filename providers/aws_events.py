"""Cloud events for the AWS provider: EventBridge → SQS → ``InstanceEvent``.

An EventBridge rule (created by the terraform module) sends four kinds of
events to one SQS queue; this module long-polls the queue and turns them into
spotfleet's ``InstanceEvent``:

=============================================  ================================
EventBridge ``detail-type``                    ``NoticeKind``
=============================================  ================================
EC2 Spot Instance Interruption Warning         SPOT_INTERRUPTION (deadline =
                                               event time + 2 minutes)
EC2 Instance Rebalance Recommendation          REBALANCE
EC2 Instance State-change Notification         TERMINATED (shutting-down,
                                               terminated; other states ignored)
AWS Health Event, category scheduledChange     MAINTENANCE (deadline = startTime)
=============================================  ================================

Design choices:

- A message is deleted only after it was handled: parsed, checked for
  ownership and turned into events (or recognised as irrelevant). If the
  ownership check fails (throttled, say), the batch is left on the queue and
  comes back after the visibility timeout. Unparseable messages are deleted
  with a warning: they would never parse, and redelivering them forever is a
  poison-pill loop (a dead-letter queue, if configured, is the place to keep
  them).
- Duplicates are expected (SQS is at-least-once, EventBridge may retry): events
  already returned are dropped by EventBridge event id; the controller also
  de-duplicates by (instance, kind).
- Events for instances this cluster does not own (another cluster, or an
  instance nobody tagged) are dropped: one queue may serve a whole account.
- Only the first receive of a poll waits (long polling); the rest drain what is
  already there, so ``poll_events()`` never blocks for longer than
  ``sqs_wait_seconds`` plus a few quick calls.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from spotfleet.clock import Clock
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.providers.aws_errors import AWS_ERRORS, translate

log = logging.getLogger(__name__)

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
HEALTH = "AWS Health Event"
SPOT_NOTICE = timedelta(minutes=2)
GONE_STATES = frozenset({"shutting-down", "terminated"})
SOURCE = "eventbridge"
_SEEN_LIMIT = 4096
_MAX_MESSAGES = 10  # SQS maximum per receive / per delete batch


@dataclass(frozen=True, slots=True)
class Notice:
    """One parsed event about one instance (before the ownership check)."""

    event_id: str
    region: str
    instance_id: str
    kind: NoticeKind
    time: datetime
    deadline: datetime | None
    detail: str


def _parse_time(text: str) -> datetime:
    """ISO-8601 (EventBridge ``time``) or RFC 1123 (AWS Health ``startTime``)."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        parsed = parsedate_to_datetime(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _instance_id_from_arn(arn: str) -> str | None:
    tail = arn.rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else None


def parse_message(body: str) -> list[Notice]:
    """Notices in one SQS message body; ``[]`` for events spotfleet ignores.

    Accepts the EventBridge envelope directly or wrapped in an SNS notification.
    Raises ``ValueError`` (or ``KeyError``) when the body is not an event at all.
    """
    event = json.loads(body)
    if not isinstance(event, dict):
        raise ValueError("not a JSON object")
    if event.get("Type") == "Notification" and isinstance(event.get("Message"), str):
        event = json.loads(event["Message"])
    detail_type = str(event["detail-type"])
    detail: dict[str, Any] = event.get("detail") or {}
    event_id = str(event.get("id", ""))
    region = str(event.get("region", ""))
    time = _parse_time(str(event["time"]))

    def one(instance_id: str, kind: NoticeKind, deadline: datetime | None, text: str) -> Notice:
        return Notice(event_id, region, instance_id, kind, time, deadline, text)

    if detail_type == SPOT_WARNING:
        action = str(detail.get("instance-action", "terminate"))
        return [
            one(
                str(detail["instance-id"]),
                NoticeKind.SPOT_INTERRUPTION,
                time + SPOT_NOTICE,
                f"instance-action={action}",
            )
        ]
    if detail_type == REBALANCE:
        return [one(str(detail["instance-id"]), NoticeKind.REBALANCE, None, "rebalance recommendation")]
    if detail_type == STATE_CHANGE:
        state = str(detail.get("state", ""))
        if state not in GONE_STATES:
            return []
        return [one(str(detail["instance-id"]), NoticeKind.TERMINATED, None, f"state={state}")]
    if detail_type == HEALTH:
        if detail.get("eventTypeCategory") != "scheduledChange" or detail.get("service", "EC2") != "EC2":
            return []
        start = detail.get("startTime")
        deadline = _parse_time(str(start)) if start else None
        ids = {
            str(e.get("entityValue"))
            for e in detail.get("affectedEntities") or []
            if str(e.get("entityValue", "")).startswith("i-")
        }
        ids.update(i for i in (_instance_id_from_arn(str(a)) for a in event.get("resources") or []) if i)
        code = str(detail.get("eventTypeCode", "scheduledChange"))
        return [one(i, NoticeKind.MAINTENANCE, deadline, code) for i in sorted(ids)]
    return []


OwnershipCheck = Callable[[str, list[str]], set[str]]
"""(region, instance ids) → the ids this cluster owns; raises ``ProviderError``."""


class SqsEventConsumer:
    """Long-polls one SQS queue and returns events for this cluster's instances."""

    def __init__(
        self,
        *,
        queue_url: str,
        sqs: Any,
        clock: Clock,
        owned: OwnershipCheck,
        wait_seconds: int,
        max_batches: int,
        provider: str = "aws",
    ) -> None:
        self._queue_url = queue_url
        self._sqs = sqs
        self._clock = clock
        self._owned = owned
        self._wait_seconds = wait_seconds
        self._max_batches = max_batches
        self._provider = provider
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def poll(self) -> list[InstanceEvent]:
        events: list[InstanceEvent] = []
        for batch in range(self._max_batches):
            try:
                response = self._sqs.receive_message(
                    QueueUrl=self._queue_url,
                    MaxNumberOfMessages=_MAX_MESSAGES,
                    WaitTimeSeconds=self._wait_seconds if batch == 0 else 0,
                )
            except AWS_ERRORS as err:
                raise translate(err, operation="sqs:ReceiveMessage") from err
            messages = response.get("Messages") or []
            if not messages:
                break
            events.extend(self._handle(messages))
        return events

    def _handle(self, messages: list[dict[str, Any]]) -> list[InstanceEvent]:
        notices: list[Notice] = []
        for message in messages:
            try:
                notices.extend(parse_message(message.get("Body", "")))
            except (ValueError, KeyError, TypeError) as err:
                log.warning("dropping unparseable SQS message %s: %s", message.get("MessageId"), err)
        owned = self._owned_ids(notices)  # may raise: then nothing is deleted
        events = [self._event(n) for n in notices if n.instance_id in owned and self._first_time(n)]
        self._delete(messages)
        return events

    def _owned_ids(self, notices: Iterable[Notice]) -> set[str]:
        by_region: dict[str, set[str]] = {}
        for notice in notices:
            by_region.setdefault(notice.region, set()).add(notice.instance_id)
        owned: set[str] = set()
        for region, ids in by_region.items():
            owned |= self._owned(region, sorted(ids))
        return owned

    def _first_time(self, notice: Notice) -> bool:
        key = (notice.event_id, notice.instance_id, notice.kind.value)
        if key in self._seen:
            return False
        self._seen[key] = None
        while len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    def _event(self, notice: Notice) -> InstanceEvent:
        return InstanceEvent(
            provider=self._provider,
            provider_instance_id=notice.instance_id,
            kind=notice.kind,
            observed_at=notice.time,
            deadline=notice.deadline,
            source=SOURCE,
            detail=notice.detail,
        )

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        entries = [{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)]
        try:
            response = self._sqs.delete_message_batch(QueueUrl=self._queue_url, Entries=entries)
        except AWS_ERRORS as err:
            # The events were handled; a message that is not deleted comes back as
            # a duplicate, which callers tolerate. Not worth failing the poll.
            log.warning("could not delete %d SQS messages: %s", len(entries), err)
            return
        for failed in response.get("Failed") or []:
            log.warning("SQS delete failed for entry %s: %s", failed.get("Id"), failed.get("Message"))
