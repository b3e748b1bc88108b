# Copyright 2026 The Cyborg Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""An agent's inventory report, from its arrival to its sync request.

A report reads the host's row once (:func:`cyborg.db.inventory.host_state`,
one statement). An unchanged report (same digest as the last one applied)
stops there, or writes its utilization readings with one statement more.
An agent that knows its tree unchanged sends the digest alone (no
devices): if the host's row holds another digest, nothing is applied and
the agent is asked to send the tree (``resend``).
A changed one is diffed against the host's rows in one transaction (see
:mod:`cyborg.db.inventory`) that also stores its readings and counts a
Placement sync request; the sync itself is the caller's to start (see
:mod:`cyborg.conductor.sync_worker`).
"""

import dataclasses
from typing import Any

from oslo_log import log as logging
from oslo_utils import timeutils

from cyborg.conductor import notifications
from cyborg.db import inventory as inventory_db
from cyborg.domain import usage
from cyborg.domain import utilization as utilization_mod
from cyborg.notifications import notifier as notifier_mod

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReportOutcome:
    """``changed``: the report was applied; ``sync_pending``: the host's
    providers are not all in Placement yet; ``resend``: a report without
    its devices did not match the host's digest, so nothing was done and
    the agent must send its tree."""

    changed: bool
    sync_pending: bool
    resend: bool = False


def apply(context, host: str, rp_name: str,
          devices: list[dict[str, Any]] | None,
          digest: str, failed_drivers: list[str],
          utilization: dict[str, Any] | None = None,
          notifier: notifier_mod.Notifier | None = None,
          usage_period: int | None = None) -> ReportOutcome:
    """Apply ``host``'s report unless it was applied already.

    ``utilization`` (None from an agent older than RPC 1.2, which does
    not send it) is kept outside the tree: a report with readings costs
    one write more than the one read of an unchanged tree (the readings
    of all its devices, with the report's time, in one statement), never
    a diff or a Placement sync. ``devices`` None (RPC 1.3): the tree of
    ``digest``, which the agent had acknowledged; if the host's row holds
    another digest the outcome is ``resend`` and nothing is written.
    ``notifier`` sends the device.create, device.delete and
    device.health_change notifications of a changed report, once it is
    committed. ``usage_period`` (the usage audit's period, when usage
    records are sent): the busy readings also count in the mean
    utilization of the ARQs bound on their devices, with one statement.
    """
    reported = (None if utilization is None
                else utilization_mod.clean_report(utilization))
    readings = _busy_readings(reported, usage_period)
    state = inventory_db.host_state(context, host)
    # Read without a lock: most reports are unchanged, and apply_report
    # compares the digest again under the host's lock.
    if state is None or state.digest != digest:
        if devices is None:
            # The agent's tree is not the one applied last (or a removal
            # waits for the next tree): it must send it.
            LOG.info('Inventory of %s: its agent sent a digest that is not '
                     'the applied one; asking for its tree', host)
            return ReportOutcome(False, state is not None
                                 and state.sync_pending, resend=True)
        summary = inventory_db.apply_report(context, host, rp_name, devices,
                                            digest, failed_drivers, reported,
                                            readings)
        if summary is not None:
            _log_summary(host, summary)
            if notifier is not None and notifier.enabled:
                _notify(notifier, context, summary)
            # Its transaction counted a sync request: the host is pending.
            return ReportOutcome(True, True)
        # Another conductor applied this report meanwhile: read again.
        state = inventory_db.host_state(context, host)
    if reported is not None:
        values = utilization_mod.changes(state.devices, reported,
                                         failed_drivers, timeutils.utcnow())
        if values:
            inventory_db.store_utilization(context, host, values, readings)
    return ReportOutcome(False, state.sync_pending)


def _busy_readings(reported: dict[str, Any] | None,
                   usage_period: int | None
                   ) -> inventory_db.BusyReadings | None:
    """The busy readings of ``reported`` for the usage records, in the
    period of now; None when no records are made or none was read."""
    if not reported or usage_period is None:
        return None
    busy = {address: metrics[utilization_mod.GPU_PERCENT.name]
            for address, metrics in reported.items()
            if utilization_mod.GPU_PERCENT.name in metrics}
    if not busy:
        return None
    return inventory_db.BusyReadings(
        busy, usage.period_start(timeutils.utcnow(), usage_period))


def _notify(notifier: notifier_mod.Notifier, context,
            summary: inventory_db.DiffSummary) -> None:
    notifications.emit_devices(notifier, context,
                               notifications.DEVICE_CREATE,
                               summary.added_devices)
    notifications.emit_devices(notifier, context,
                               notifications.DEVICE_DELETE,
                               summary.removed_devices)
    notifications.emit_devices(notifier, context,
                               notifications.DEVICE_HEALTH_CHANGE,
                               summary.health_changed)


def _log_summary(host: str, summary) -> None:
    if summary.changed:
        LOG.info('Inventory of %s: %d added, %d updated, %d removed, '
                 '%d kept while in use', host, summary.added,
                 summary.updated, summary.removed, summary.kept_missing)
