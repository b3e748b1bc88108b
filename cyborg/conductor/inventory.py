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

"""An agent's inventory report, from its arrival to its Placement sync.

An unchanged report (same digest as the last one applied) that left
nothing pending costs one read. A changed one is diffed against the
host's rows in one transaction (see :mod:`cyborg.db.inventory`), and the
host's state is read again to learn whether its providers must be
synced.
"""

import dataclasses
from typing import Any

from oslo_log import log as logging
from oslo_utils import timeutils

from cyborg.db import inventory as inventory_db
from cyborg.domain import utilization as utilization_mod

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReportOutcome:
    """``changed``: the report was applied; ``sync_pending``: the host's
    providers are not all in Placement yet."""

    changed: bool
    sync_pending: bool


def apply(context, host: str, rp_name: str, devices: list[dict[str, Any]],
          digest: str, failed_drivers: list[str],
          utilization: dict[str, Any] | None = None) -> ReportOutcome:
    """Apply ``host``'s report unless it was applied already.

    ``utilization`` (None from an agent that does not send it) is kept
    outside the tree: a report with readings costs one write more than
    the one read of an unchanged tree (the readings of all its devices,
    with the report's time, in one statement), never a diff or a
    Placement sync.
    """
    if utilization is None:
        return _apply_tree(context, host, rp_name, devices, digest,
                           failed_drivers)
    reported = utilization_mod.clean_report(utilization)
    state = inventory_db.host_state(context, host)
    changed = False
    if state is None or state.digest != digest:
        summary = inventory_db.apply_report(context, host, rp_name, devices,
                                            digest, failed_drivers)
        changed = summary is not None
        _log_summary(host, summary)
        state = inventory_db.host_state(context, host)
    values = utilization_mod.changes(state.devices, reported,
                                     failed_drivers, timeutils.utcnow())
    if values:
        inventory_db.store_utilization(context, host, values)
    return ReportOutcome(changed, state.sync_pending)


def _log_summary(host: str, summary) -> None:
    if summary is not None and summary.changed:
        LOG.info('Inventory of %s: %d added, %d updated, %d removed, '
                 '%d kept while in use', host, summary.added,
                 summary.updated, summary.removed, summary.kept_missing)


def _apply_tree(context, host: str, rp_name: str,
                devices: list[dict[str, Any]], digest: str,
                failed_drivers: list[str]) -> ReportOutcome:
    """A report without utilization (an agent older than RPC 1.2)."""
    state = inventory_db.report_state(context, host)
    changed = False
    if state is None or state[0] != digest:
        summary = inventory_db.apply_report(context, host, rp_name, devices,
                                            digest, failed_drivers)
        changed = summary is not None
        _log_summary(host, summary)
        state = inventory_db.report_state(context, host)
    return ReportOutcome(changed, state[1])
