"""A moto server for the terraform apply test, with the one EC2 call moto lacks.

Run as ``python tests/terraform/moto_server.py -H 127.0.0.1 -p PORT`` (moto's own
arguments). Two differences from ``python -m moto.server``:

- ``MonitorInstances`` / ``UnmonitorInstances``: moto 5 raises NotImplementedError
  (HTTP 500) for both. The AWS module's controller sets ``monitoring = true`` and
  the terraform provider calls ``MonitorInstances`` after ``RunInstances``; it
  treats the 500 as retryable and the apply never ends. Here they set the moto
  instance's monitoring state and answer as EC2 does, so the module is applied
  exactly as written.
- Terminating an instance releases the network interfaces it does not delete
  (``delete_on_termination = false``, as the controller's is), as EC2 does.
  moto keeps them attached and refuses to detach a primary interface, so
  ``terraform destroy`` failed on the controller's ENI ("The network interface
  at device index 0 ... cannot be detached"). Released, the provider's detach
  gets ``InvalidAttachmentID.NotFound`` (as from EC2), skips it and deletes.
- AWS managed IAM policies are loaded (``MOTO_IAM_LOAD_MANAGED_POLICIES``), so
  attaching ``AmazonSSMManagedInstanceCore`` to the controller role works.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _patch_monitoring() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.responses.monitoring import Monitoring

    def _set(self: Any, state: str) -> ActionResult:
        self.error_on_dryrun()
        ids = self._get_param("InstanceIds", [])
        items = []
        for instance in self.ec2_backend.get_multi_instances_by_id(ids):
            instance.monitoring_state = state
            items.append({"InstanceId": instance.id, "Monitoring": {"State": state}})
        return ActionResult({"InstanceMonitorings": items})

    Monitoring.monitor_instances = lambda self: _set(self, "enabled")  # type: ignore[method-assign]
    Monitoring.unmonitor_instances = lambda self: _set(self, "disabled")  # type: ignore[method-assign]


def _patch_terminate() -> None:
    from moto.ec2.models.instances import Instance

    terminate = Instance.terminate

    def terminate_and_release(self: Any) -> Any:
        kept = [nic for nic in self.nics.values() if not nic.delete_on_termination]
        state = terminate(self)
        for nic in kept:
            # What EC2 does: the interface is detached and available. It stays in
            # self.nics only because moto renders the terminated instance from it.
            nic.instance = None
            nic.attachment_id = None
            nic.attach_time = None
            nic.status = "available"
            nic.device_index = None
        return state

    Instance.terminate = terminate_and_release  # type: ignore[method-assign]


def main() -> None:
    os.environ.setdefault("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    _patch_monitoring()
    _patch_terminate()
    from moto.server import main as moto_main

    moto_main(sys.argv[1:])


if __name__ == "__main__":
    main()
