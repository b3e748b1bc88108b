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

from cyborg.db import inventory as inventory_db

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReportOutcome:
    """``changed``: the report was applied; ``sync_pending``: the host's
    providers are not all in Placement yet."""

    changed: bool
    sync_pending: bool


def apply(context, host: str, rp_name: str, devices: list[dict[str, Any]],
          digest: str, failed_drivers: list[str]) -> ReportOutcome:
    """Apply ``host``'s report unless it was applied already."""
    state = inventory_db.report_state(context, host)
    changed = False
    if state is None or state[0] != digest:
        summary = inventory_db.apply_report(context, host, rp_name, devices,
                                            digest, failed_drivers)
        changed = summary is not None
        if summary is not None and summary.changed:
            LOG.info('Inventory of %s: %d added, %d updated, %d removed, '
                     '%d kept while in use', host, summary.added,
                     summary.updated, summary.removed, summary.kept_missing)
        state = inventory_db.report_state(context, host)
    return ReportOutcome(changed, state[1])
