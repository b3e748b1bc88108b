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

"""Applying an agent's device tree to the database.

A report is the whole tree of one host. An unchanged tree (same digest as
the last one applied) costs one indexed read. A changed tree is diffed
against the host's rows in one transaction that first locks the host's
service row, so reports of one host are applied one at a time by any
number of conductors. The host's rows are read with one query per table,
and new rows are written with one or two statements per table, however
many devices a report adds.

Devices vanish from the database only when nothing holds them: a device
that disappears while one of its attach handles is in use is kept and
marked ``missing`` until the handle is released; the first report after
that removes it, even a report unchanged since (see :func:`host_state`).
Devices of a driver that failed during discovery are left as they are.
Why a device has its health, and since when, is stamped in the INSERT or
UPDATE that adds the device or changes its health or presence (reasons:
:mod:`cyborg.domain.devices`).

Deployables imported from an upstream Cyborg are adopted by the reported
deployables of their device (see :mod:`cyborg.domain.adoption`): the
adopting one keeps the imported row (its uuid and provider uuid) and
takes its name, and the imported attach handles that match reported ones
keep their uuid and ``in_use``. A bound handle keeps the attach info
Nova was given until it is released. An imported deployable that no
reported one adopts is removed, or ``retained`` with only its handles in
use while it has any (its provider takes nothing new). The handles it
holds are not added again to the reported deployables of its device
(their providers reserve the units they have no handle for, see
:func:`cyborg.conductor.placement_sync.load_host_state`). The first
report after a release, even a report unchanged since, removes the
released handle (the reported deployable wanting it gets it) or, after
the last, the retained deployable.

Deployables may be nested (``children`` in the wire form): a child's row
has ``parent_id`` (its parent's) and ``root_id`` (the top deployable's);
those of a top deployable are NULL. Names are unique in a device at any
depth, and identify a deployable across reports as before.
"""

import dataclasses
import datetime
from typing import Any

from oslo_log import log as logging
from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import constants
from cyborg.db import api as db_api
from cyborg.db import device_profiles
from cyborg.db import services
from cyborg.db import taint_rules as taint_rules_db
from cyborg.db import taints as taints_db
from cyborg.db import usage as usage_db
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import CPIDS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.db.models import SERVICES
from cyborg.domain import adoption
from cyborg.domain import bitstream as bitstream_rules
from cyborg.domain import device_tree
from cyborg.domain import devices as device_rules
from cyborg.domain import partitions as partition_rules
from cyborg.domain import providers
from cyborg.domain import taints as taint_rules
from cyborg.domain import utilization as utilization_mod

LOG = logging.getLogger(__name__)

@dataclasses.dataclass
class DiffSummary:
    added: int = 0
    updated: int = 0
    removed: int = 0
    kept_missing: int = 0
    adopted: int = 0
    retained: int = 0
    # The devices the diff added (the values inserted), removed (their
    # rows) and whose health changed (their values after it), for the
    # conductor's notifications: no statement of their own.
    added_devices: list[dict[str, Any]] = dataclasses.field(
        default_factory=list)
    removed_devices: list[Any] = dataclasses.field(default_factory=list)
    health_changed: list[dict[str, Any]] = dataclasses.field(
        default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed
                    or self.kept_missing)


def _removal_pending(host) -> sa.ColumnElement:
    """Whether a device of ``host`` kept ``missing`` while in use holds
    no handle in use any more, or a deployable kept ``retained`` has a
    handle released: the next report, changed or not, must be applied to
    remove it (or the handle, which another deployable may then take)."""
    in_use = sa.exists().where(DEPLOYABLES.c.device_id == DEVICES.c.id,
                               HANDLES.c.deployable_id == DEPLOYABLES.c.id,
                               HANDLES.c.in_use == sa.true())
    retained = DEPLOYABLES.alias('retained')
    held = sa.exists().where(HANDLES.c.deployable_id == retained.c.id,
                             HANDLES.c.in_use == sa.true())
    free = sa.exists().where(HANDLES.c.deployable_id == retained.c.id,
                             HANDLES.c.in_use == sa.false())
    released = sa.exists().where(retained.c.device_id == DEVICES.c.id,
                                 DEVICES.c.hostname == host,
                                 retained.c.retained == sa.true(),
                                 sa.or_(~held, free))
    return sa.or_(sa.exists().where(DEVICES.c.hostname == host,
                                    DEVICES.c.missing == sa.true(),
                                    ~in_use), released)


@dataclasses.dataclass(frozen=True)
class HostState:
    """What one read tells of a host: its last report's digest (None
    when a released missing device waits for removal), whether its
    providers wait for a Placement sync, and ``{device address:
    (driver, stored utilization)}`` of its devices."""

    digest: str | None
    sync_pending: bool
    devices: dict[str, tuple[str | None, str | None]]


def _host_state_query():
    host = sa.bindparam('host')
    reported = DEVICES.alias('reported')
    return sa.select(
        SERVICES.c.report_hash, SERVICES.c.sync_requested,
        SERVICES.c.sync_done, _removal_pending(host).label('removal'),
        reported.c.address, reported.c.driver,
        reported.c.utilization).select_from(
        SERVICES.outerjoin(reported, reported.c.hostname ==
                           SERVICES.c.host)).where(
        SERVICES.c.host == host,
        SERVICES.c.binary == constants.BINARY_AGENT)


# Built once: every agent report runs it, and building it (aliases, a
# dozen clauses) costs more CPU than the rest of an unchanged report.
_HOST_STATE = _host_state_query()


def host_state(context, host: str) -> HostState | None:
    """What a report needs to know of its host, with one statement (the
    devices are joined); None for a host that never reported. Not in a
    transaction of the caller's (see :func:`cyborg.db.api.single_read`).
    """
    with db_api.single_read() as connection:
        rows = connection.execute(_HOST_STATE, {'host': host}).all()
    if not rows:
        return None
    first = rows[0]
    return HostState(
        # No digest: no report matches it, so the next one is applied even if
        # unchanged, and removes what waits for removal.
        None if first.removal else first.report_hash,
        first.sync_requested > first.sync_done,
        {row.address: (row.driver, row.utilization) for row in rows
         # The outer join gives a host without devices one row whose device
         # columns are NULL.
         if row.address is not None})


def report_state(context, host: str) -> tuple[str | None, bool] | None:
    """(digest, Placement sync pending) of :func:`host_state`."""
    state = host_state(context, host)
    return None if state is None else (state.digest, state.sync_pending)


@dataclasses.dataclass(frozen=True)
class BusyReadings:
    """Busy readings of a report to add to the mean utilization of the
    ARQs bound on their devices (:func:`cyborg.db.usage.add_readings`):
    {device address: busy percent}, and the start of their period."""

    busy: dict[str, float]
    period_start: datetime.datetime


@db_api.connection_writer
def store_utilization(context, host: str, values: dict[str, str | None],
                      readings: BusyReadings | None = None) -> None:
    """Write the utilization text (None: none) of some of ``host``'s
    devices, with one statement; with ``readings``, add those of these
    devices to their bound ARQs' with one more. The rows' ``updated_at``
    stays: a utilization is not a change of the device."""
    _store_utilization(context.connection, host, values, readings)


def _store_utilization(connection, host: str,
                       values: dict[str, str | None],
                       readings: BusyReadings | None = None) -> None:
    if not values:
        return
    if readings is not None:
        usage_db.add_readings(connection, host, {
            address: busy for address, busy in readings.busy.items()
            if address in values}, readings.period_start)
    # One CASE on the address: one statement for any number of devices.
    # updated_at is set to itself, or the column's onupdate would stamp the
    # device as changed.
    connection.execute(
        sa.update(DEVICES).where(
            DEVICES.c.hostname == host,
            DEVICES.c.address.in_(sorted(values))).values(
            utilization=sa.case(
                {address: sa.literal(text, sa.Text) if text is not None
                 else sa.null() for address, text in values.items()},
                value=DEVICES.c.address),
            updated_at=DEVICES.c.updated_at))


@db_api.connection_writer
def apply_report(context, host: str, rp_name: str,
                 devices: list[dict[str, Any]], digest: str,
                 failed_drivers: list[str],
                 utilization: dict[str, Any] | None = None,
                 readings: BusyReadings | None = None,
                 max_taint_keys: int | None = None
                 ) -> DiffSummary | None:
    """Apply a report; None if it was already applied (same digest) and
    no released missing device waits for removal.

    An applied report is a Placement sync request of the host, counted
    in this transaction (so the host's providers are pending once it
    commits: the caller needs no read to know it). With ``utilization``
    (cleaned readings, see :func:`cyborg.domain.utilization.clean_report`)
    the readings are stored in this transaction too, with one statement.
    The driver taints of the reported devices replace their driver rows
    (:func:`cyborg.db.taints.sync_driver_taints`; at most
    ``max_taint_keys`` distinct keys, None: ``[taints] max_keys``).
    """
    connection = context.connection
    # Locked before the digest is compared: a second conductor applying the
    # same report waits here, then finds its digest recorded.
    service = services.lock_agent(connection, host)
    if service.report_hash == digest and not connection.execute(
            sa.select(_removal_pending(host))).scalar():
        return None
    diff = _HostDiff(connection, host, failed_drivers, max_taint_keys)
    summary = diff.apply(devices)
    # Devices new to the host get the taints of the rules selecting them.
    taint_rules_db.taint_new_devices(
        connection, [device['uuid'] for device in summary.added_devices])
    services.record_report(connection, service.id, digest, rp_name)
    if utilization is not None:
        _store_utilization(connection, host, utilization_mod.changes(
            diff.utilization_rows(devices), utilization, failed_drivers,
            timeutils.utcnow()), readings)
    return summary


def _note_health_change(summary: DiffSummary, row,
                        changes: dict[str, Any]) -> None:
    """Note in ``summary`` a device whose update changes its health."""
    if 'health' in changes:
        summary.health_changed.append(dict(row._mapping, **changes))


def _attributes(deployable: dict[str, Any]) -> dict[str, str]:
    """The attribute rows a reported deployable should have."""
    values = providers.placement_attributes(deployable['resource_class'],
                                            deployable['traits'])
    values.update(deployable.get('attributes') or {})
    return values


def _reported_taints(host: str, device: dict[str, Any]
                     ) -> list[taint_rules.Taint]:
    """The driver taints of a reported device (wire form); an invalid
    one is left out with a warning, the rest of the report applies."""
    taints = []
    for wire in device.get('taints') or ():
        try:
            taint = taint_rules.Taint.from_wire(wire)
        except (KeyError, TypeError, ValueError) as e:
            LOG.warning('Inventory of %s: invalid taint %r of device %s '
                        'left out: %s', host, wire, device['address'], e)
            continue
        # An agent reports driver taints only, whatever it says.
        taint.source = taint_rules.Source.DRIVER
        taints.append(taint)
    return taints


def _board_info(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return device_tree.canonical_json(value)


class _HostDiff:
    """Diff of one host's reported tree against its rows."""

    def __init__(self, connection, host: str, failed_drivers: list[str],
                 max_taint_keys: int | None = None):
        self.connection = connection
        self.host = host
        self.failed_drivers = set(failed_drivers)
        self.max_taint_keys = max_taint_keys
        self.summary = DiffSummary()
        self.now = timeutils.utcnow()
        # {device id: its reported driver taints}, for the devices reported.
        self._taints: dict[int, list[taint_rules.Taint]] = {}
        # Ids of the devices counted as updated.
        self._updated: set[int] = set()
        self._load()

    def _rows(self, table, column, values) -> list:
        if not values:
            return []
        return list(self.connection.execute(
            sa.select(table).where(column.in_(list(values)))))

    def _load(self) -> None:
        self.devices = {row.address: row for row in self.connection.execute(
            sa.select(DEVICES).where(DEVICES.c.hostname == self.host))}
        device_ids = [row.id for row in self.devices.values()]
        self.deployables = self._rows(DEPLOYABLES, DEPLOYABLES.c.device_id,
                                      device_ids)
        deployable_ids = [row.id for row in self.deployables]
        self.handles = self._rows(HANDLES, HANDLES.c.deployable_id,
                                  deployable_ids)
        self.attributes = self._rows(ATTRIBUTES, ATTRIBUTES.c.deployable_id,
                                     deployable_ids)
        self.cpids = self._rows(CPIDS, CPIDS.c.device_id, device_ids)
        # (device id, name) -> (id, root id) of every deployable, known
        # or added, to link the children added after their parents.
        self._ids = {(row.device_id, row.name): (row.id, row.root_id)
                     for row in self.deployables}
        # id -> (parent_id, root_id) of the known deployables, as written.
        self._links_of = {row.id: (row.parent_id, row.root_id)
                          for row in self.deployables}
        # device id -> identities of the handles in use that rows other
        # than the reported deployable wanting them hold (not added
        # again while they are held).
        self._held: dict[int, set[str]] = {}
        self._referenced: set[str] | None = None
        # Deployables adopted by this report.
        self._adopted: set[int] = set()
        # Addresses of the devices this report deleted.
        self._removed: set[str] = set()

    def utilization_rows(self, reported: list[dict[str, Any]]
                         ) -> dict[str, tuple[str | None, str | None]]:
        """``{address: (driver, stored utilization)}`` of the host's
        devices once ``reported`` is applied (what
        :func:`host_state` would read next): the reported ones, then
        those kept (missing while in use, or of a failed driver)."""
        rows: dict[str, tuple[str | None, str | None]] = {
            address: (row.driver, row.utilization)
            for address, row in self.devices.items()
            if address not in self._removed}
        for device in reported:
            known = self.devices.get(device['address'])
            rows[device['address']] = (
                device.get('driver'),
                None if known is None else known.utilization)
        return rows

    def _children(self, rows, column: str, parent_id: int) -> list:
        return [row for row in rows if getattr(row, column) == parent_id]

    def apply(self, reported: list[dict[str, Any]]) -> DiffSummary:
        wanted = {device['address']: device for device in reported}
        for address, row in self.devices.items():
            if address in wanted:
                self._update_device(row, wanted[address])
            # A driver that failed discovery reported nothing of its devices;
            # they are not gone, so they stay as they are.
            elif row.driver not in self.failed_drivers:
                self._remove_device(row)
        self._add_devices([device for address, device in wanted.items()
                           if address not in self.devices])
        self._sync_taints()
        return self.summary

    def _sync_taints(self) -> None:
        """Store the reported driver taints; a device whose taints alone
        changed counts as updated (its providers' traits change)."""
        changed = taints_db.sync_driver_taints(
            self.connection, self._taints,
            self.max_taint_keys, self.now)
        known = {row.id for row in self.devices.values()}
        self.summary.updated += len((changed & known) - self._updated)

    def _insert(self, table, rows: list[dict[str, Any]]) -> list[int]:
        """Insert rows (each with its ``uuid``) with one statement; their
        ids, in order (read back with a second statement)."""
        if not rows:
            return []
        self.connection.execute(sa.insert(table), rows)
        # An executemany INSERT does not give its primary keys back on every
        # backend; the new rows' uuids find them with one more statement.
        ids = dict(self.connection.execute(
            sa.select(table.c.uuid, table.c.id).where(
                table.c.uuid.in_([row['uuid'] for row in rows]))).all())
        return [ids[row['uuid']] for row in rows]

    # Devices

    def _device_values(self, device: dict[str, Any]) -> dict[str, Any]:
        return {
            'type': device['type'], 'vendor': device['vendor'],
            'model': device['model'],
            'std_board_info': _board_info(device.get('std_board_info')),
            'vendor_board_info': _board_info(
                device.get('vendor_board_info')),
            'health': (device.get('health')
                       or device_tree.Health.HEALTHY.value),
            'driver': device.get('driver'), 'missing': False,
            'partitions': partition_rules.stored_form(
                device.get('partitions')),
        }

    def _add_devices(self, devices: list[dict[str, Any]]) -> None:
        """Add new devices and everything under them, with one statement
        (or two) per table whatever their number."""
        rows = []
        for device in devices:
            values = self._device_values(device)
            rows.append(dict(
                values, uuid=uuidutils.generate_uuid(), hostname=self.host,
                address=device['address'], health_since=self.now,
                health_reason=device_rules.health_reason(values['health'],
                                                         False),
                created_at=self.now))
        device_ids = self._insert(DEVICES, rows)
        for device, device_id in zip(devices, device_ids, strict=True):
            self._taints[device_id] = _reported_taints(self.host, device)
        self.summary.added_devices += rows
        cpids = [(device_id, cpid) for device, device_id
                 in zip(devices, device_ids, strict=True)
                 for cpid in device['controlpath_ids']]
        cpid_ids = self._insert(CPIDS, [self._cpid_values(device_id, cpid)
                                        for device_id, cpid in cpids])
        first_cpid: dict[int, int] = {}
        for (device_id, _cpid), cpid_id in zip(cpids, cpid_ids,
                                               strict=True):
            first_cpid.setdefault(device_id, cpid_id)
        self._add_deployables([
            (device_id, device['address'], first_cpid.get(device_id),
             deployable, parent, depth)
            for device, device_id in zip(devices, device_ids, strict=True)
            for deployable, parent, depth in device_tree.walk_wire(
                device['deployables'])])
        self.summary.added += len(devices)

    def _update_device(self, row, device: dict[str, Any]) -> None:
        values = self._device_values(device)
        changes = {key: value for key, value in values.items()
                   if getattr(row, key) != value}
        reason = device_rules.health_reason(
            values['health'], values['missing'],
            (row.health, row.missing, row.health_reason))
        if reason is not None:
            # Stamped in the row's UPDATE: no statement of its own.
            changes.update(health_reason=reason, health_since=self.now)
        if changes:
            self.connection.execute(sa.update(DEVICES).where(
                DEVICES.c.id == row.id).values(updated_at=self.now,
                                               **changes))
            _note_health_change(self.summary, row, changes)
        changed = bool(changes)
        self._taints[row.id] = _reported_taints(self.host, device)
        cpid_ids = self._sync_cpids(row.id, device['controlpath_ids'])
        existing = {dep.name: dep for dep in self._children(
            self.deployables, 'device_id', row.id)}
        walked = list(device_tree.walk_wire(device['deployables']))
        wanted = {dep['name'] for dep, _parent, _depth in walked}
        changed |= self._adopt(row, existing, walked)
        self._held[row.id] = self._held_handles(existing, walked)
        new = []
        for deployable, parent, depth in walked:
            name = deployable['name']
            if name in existing:
                changed |= self._update_deployable(
                    existing[name], deployable, cpid_ids[0],
                    adoption.is_foreign(existing[name].rp_uuid, self.host,
                                        row.address, name))
            else:
                new.append((row.id, row.address, cpid_ids[0], deployable,
                            parent, depth))
                changed = True
        self._add_deployables(new)
        changed |= self._relink(row.id, walked)
        # Children before their parents.
        for name, dep_row in sorted(existing.items(),
                                    key=lambda item: -item[1].id):
            if name not in wanted:
                changed |= self._remove_deployable(dep_row)
        if changed:
            self.summary.updated += 1
            self._updated.add(row.id)

    def _remove_device(self, row) -> None:
        deployables = self._children(self.deployables, 'device_id', row.id)
        if any(handle.in_use for dep in deployables
               for handle in self._children(self.handles, 'deployable_id',
                                            dep.id)):
            if not row.missing:
                self.connection.execute(sa.update(DEVICES).where(
                    DEVICES.c.id == row.id).values(
                        missing=True, updated_at=self.now,
                        health_reason=device_rules.REASON_VANISHED,
                        health_since=self.now))
                LOG.warning('Device %s of host %s vanished while in use; '
                            'keeping it until it is released', row.address,
                            self.host)
            self.summary.kept_missing += 1
            return
        for dep in deployables:
            self._delete_deployable(dep.id)
        self.connection.execute(sa.delete(CPIDS).where(
            CPIDS.c.device_id == row.id))
        # Its driver and admin taints go with it.
        taints_db.delete_device_taints(self.connection, [row.id])
        self.connection.execute(sa.delete(DEVICES).where(
            DEVICES.c.id == row.id))
        self._removed.add(row.address)
        self.summary.removed_devices.append(row._mapping)
        self.summary.removed += 1

    # Adoption of imported deployables

    def _functions(self, deployable_id: int,
                   in_use: bool = False) -> set[str]:
        """PCI functions of a known deployable's handles (those in use)."""
        return {function for handle in self._children(
            self.handles, 'deployable_id', deployable_id)
            if (handle.in_use or not in_use)
            and (function := adoption.pci_function(handle.attach_info))}

    def _adopt(self, device, existing: dict[str, Any],
               walked: list) -> bool:
        """Rename the foreign deployables of ``device`` that reported
        ones adopt (see :func:`cyborg.domain.adoption.match`), updating
        ``existing`` ({name: row}) to their new names."""
        wanted = {dep['name'] for dep, _parent, _depth in walked}
        names = {dep.id: name for name, dep in existing.items()
                 if name not in wanted and adoption.is_foreign(
                     dep.rp_uuid, self.host, device.address, name)}
        if not names:
            return False
        unnamed = {dep['name']: {function for handle in dep['attach_handles']
                                 if (function := adoption.pci_function(
                                     handle['attach_info']))}
                   for dep, _parent, _depth in walked
                   if dep['name'] not in existing}
        foreign = [(dep_id, self._functions(dep_id),
                    self._functions(dep_id, in_use=True))
                   for dep_id in names]
        matches = adoption.match(unnamed, foreign)
        for name, dep_id in matches.items():
            row = existing.pop(names[dep_id])
            self.connection.execute(sa.update(DEPLOYABLES).where(
                DEPLOYABLES.c.id == dep_id).values(
                    name=name, retained=False, updated_at=self.now))
            existing[name] = row
            self._adopted.add(dep_id)
            self._ids[device.id, name] = self._ids.pop(
                (device.id, names[dep_id]))
            self.summary.adopted += 1
            LOG.info('Deployable %s (%s) of device %s of host %s adopted '
                     'as %s', row.uuid, names[dep_id], device.address,
                     self.host, name)
        return bool(matches)

    def _held_handles(self, existing: dict[str, Any],
                      walked: list) -> set[str]:
        """Identities of the handles in use under ``existing`` that the
        reported deployable of their row does not carry."""
        in_use = [(name, adoption.handle_identity(handle.attach_info))
                  for name, dep in existing.items()
                  for handle in self._children(self.handles,
                                               'deployable_id', dep.id)
                  if handle.in_use]
        if not in_use:
            return set()
        carried = {dep['name']: {adoption.handle_identity(
            handle['attach_info']) for handle in dep['attach_handles']}
            for dep, _parent, _depth in walked}
        return {identity for name, identity in in_use
                if identity not in carried.get(name, set())}

    def _kept_traits(self, deployable_id: int,
                     ours: list[str]) -> list[str]:
        """Traits an adopted deployable keeps beside ``ours``: the
        recorded ones that a device profile references."""
        recorded = {row.value for row in self._children(
            self.attributes, 'deployable_id', deployable_id)
            if row.key.startswith(providers.TRAIT_KEY_PREFIX)}
        if not recorded - set(ours):
            return []
        if self._referenced is None:
            self._referenced = device_profiles.referenced_traits(
                self.connection)
        return adoption.kept_traits(recorded, ours, self._referenced)

    # Control paths

    def _cpid_values(self, device_id: int,
                     cpid: dict[str, Any]) -> dict[str, Any]:
        return dict(uuid=uuidutils.generate_uuid(), device_id=device_id,
                    cpid_type=cpid['cpid_type'],
                    cpid_info=device_tree.canonical_json(cpid['cpid_info']),
                    created_at=self.now)

    def _add_cpid(self, device_id: int, cpid: dict[str, Any]) -> int:
        return self.connection.execute(sa.insert(CPIDS).values(
            **self._cpid_values(device_id, cpid))).inserted_primary_key[0]

    def _sync_cpids(self, device_id: int,
                    wanted: list[dict[str, Any]]) -> list[int]:
        existing = {row.cpid_info: row.id for row in self._children(
            self.cpids, 'device_id', device_id)}
        ids = []
        for cpid in wanted:
            key = device_tree.canonical_json(cpid['cpid_info'])
            # Matched on canonical JSON, so that a report spelling the same
            # info with another key order does not add a second row.
            ids.append(existing.get(key) or self._add_cpid(device_id, cpid))
        return ids

    # Deployables

    def _links(self, device_id: int, parent: str | None) -> dict[str, Any]:
        """``parent_id`` and ``root_id`` of a deployable of ``device_id``
        whose parent is named ``parent`` (None: a top one)."""
        if parent is None:
            return {'parent_id': None, 'root_id': None}
        parent_id, parent_root = self._ids[device_id, parent]
        # A top parent has no root_id: it is the root of its children.
        return {'parent_id': parent_id, 'root_id': parent_root or parent_id}

    def _relink(self, device_id: int, walked: list) -> bool:
        """Move the deployables reported under another parent (or whose
        root changed), parents first: known ones moved, and new ones
        added under a parent that moved."""
        changed = False
        for deployable, parent, _depth in walked:
            deployable_id = self._ids[device_id, deployable['name']][0]
            links = self._links(device_id, parent)
            wanted = (links['parent_id'], links['root_id'])
            if self._links_of[deployable_id] != wanted:
                self.connection.execute(sa.update(DEPLOYABLES).where(
                    DEPLOYABLES.c.id == deployable_id).values(
                        updated_at=self.now, **links))
                self._links_of[deployable_id] = wanted
                self._ids[device_id, deployable['name']] = (
                    deployable_id, links['root_id'])
                changed = True
        return changed

    def _add_deployables(self, new: list[tuple]) -> None:
        """Add deployables, given as (device id, device address, control
        path id, reported deployable, parent's name or None, depth), with
        their handles and attributes: one statement (or two) per table
        and depth, parents first."""
        # Level by level: a child's parent_id is its parent's id, known only
        # once the parent's level is inserted.
        for depth in sorted({item[5] for item in new}):
            self._add_level([item for item in new if item[5] == depth])

    def _add_level(self, new: list[tuple]) -> None:
        ids = self._insert(DEPLOYABLES, [dict(
            uuid=uuidutils.generate_uuid(), name=deployable['name'],
            num_accelerators=deployable['num_accelerators'],
            device_id=device_id, driver_name=deployable.get('driver_name'),
            preparation=device_tree.reported_preparation(deployable),
            rp_uuid=providers.provider_uuid(self.host, address,
                                            deployable['name']),
            created_at=self.now, **self._links(device_id, parent))
            for device_id, address, _cpid, deployable, parent, _depth
            in new])
        handles, attributes = [], []
        for (device_id, _address, cpid_id, deployable, parent,
             _depth), deployable_id in zip(new, ids, strict=True):
            links = self._links(device_id, parent)
            self._ids[device_id, deployable['name']] = (deployable_id,
                                                        links['root_id'])
            self._links_of[deployable_id] = (links['parent_id'],
                                             links['root_id'])
            # Handles held in use by another row (adopted or retained) are not
            # added again: the unit would be offered twice.
            held = self._held.get(device_id)
            handles += self._handle_rows(deployable_id, cpid_id, [
                handle for handle in deployable['attach_handles']
                if not held or adoption.handle_identity(
                    handle['attach_info']) not in held])
            attributes += self._attribute_rows(deployable_id,
                                               _attributes(deployable))
        if handles:
            self.connection.execute(sa.insert(HANDLES), handles)
        if attributes:
            self.connection.execute(sa.insert(ATTRIBUTES), attributes)

    def _update_deployable(self, row, deployable: dict[str, Any],
                           cpid_id: int, foreign: bool = False) -> bool:
        """Bring a known deployable in line with the reported one; an
        adopted (``foreign``) one keeps the traits of its own that a
        device profile references."""
        wanted = dict(num_accelerators=deployable['num_accelerators'],
                      driver_name=deployable.get('driver_name'),
                      preparation=device_tree.reported_preparation(
                          deployable), retained=False)
        changes = {key: value for key, value in wanted.items()
                   if getattr(row, key) != value}
        if (row.bitstream_id is not None and row.id not in self._adopted
                and self._function_changed(row.id,
                                           deployable.get('traits') or [])):
            # The region runs another function than the bitstream the
            # conductor recorded (programmed by other means): what it
            # holds is unknown now. (An adopted deployable's recorded
            # traits are upstream's, named otherwise: its bitstream
            # stays.)
            changes['bitstream_id'] = None
        if changes:
            self.connection.execute(sa.update(DEPLOYABLES).where(
                DEPLOYABLES.c.id == row.id).values(updated_at=self.now,
                                                   **changes))
        handles = self._sync_handles(row.id, cpid_id,
                                     deployable['attach_handles'],
                                     self._held.get(row.device_id, set()))
        values = _attributes(deployable)
        if foreign:
            kept = self._kept_traits(row.id, deployable['traits'])
            values.update(providers.placement_attributes(
                deployable['resource_class'],
                list(deployable['traits']) + kept))
        attributes = self._sync_attributes(row.id, values)
        return bool(changes) or handles or attributes

    def _function_changed(self, deployable_id: int,
                          traits: list[str]) -> bool:
        """Whether the reported function traits differ from those
        recorded for the deployable."""
        recorded = {row.value for row in self._children(
            self.attributes, 'deployable_id', deployable_id)
            if row.key.startswith(providers.TRAIT_KEY_PREFIX)}
        return (bitstream_rules.function_traits(recorded)
                != bitstream_rules.function_traits(traits))

    def _remove_deployable(self, row) -> bool:
        """Remove a deployable no longer reported, or keep it
        ``retained``, with only its handles in use, while it has any."""
        handles = self._children(self.handles, 'deployable_id', row.id)
        if any(handle.in_use for handle in handles):
            # A free handle of it would never be bound (its provider
            # takes nothing new); another deployable may want it.
            free = [handle.id for handle in handles if not handle.in_use]
            if free:
                self.connection.execute(sa.delete(HANDLES).where(
                    HANDLES.c.id.in_(free)))
            self.summary.retained += 1
            if row.retained:
                return bool(free)
            self.connection.execute(sa.update(DEPLOYABLES).where(
                DEPLOYABLES.c.id == row.id).values(retained=True,
                                                   updated_at=self.now))
            LOG.info('Deployable %s (%s) of host %s is no longer reported '
                     'but in use; keeping it until it is released',
                     row.uuid, row.name, self.host)
            return True
        self._delete_deployable(row.id)
        return True

    def _delete_deployable(self, deployable_id: int) -> None:
        # Foreign keys: what points at the row is unlinked or deleted before
        # it. An ARQ bound to a handle holds it in use, and a deployable with a
        # handle in use is retained, never deleted.
        self.connection.execute(sa.update(ARQS).where(
            ARQS.c.deployable_id == deployable_id,
            ARQS.c.attach_handle_id.is_(None)).values(deployable_id=None))
        self.connection.execute(sa.delete(HANDLES).where(
            HANDLES.c.deployable_id == deployable_id))
        self.connection.execute(sa.delete(ATTRIBUTES).where(
            ATTRIBUTES.c.deployable_id == deployable_id))
        self.connection.execute(sa.update(DEPLOYABLES).where(
            DEPLOYABLES.c.parent_id == deployable_id).values(parent_id=None))
        self.connection.execute(sa.update(DEPLOYABLES).where(
            DEPLOYABLES.c.root_id == deployable_id).values(root_id=None))
        self.connection.execute(sa.delete(DEPLOYABLES).where(
            DEPLOYABLES.c.id == deployable_id))

    # Attach handles

    def _handle_rows(self, deployable_id: int, cpid_id: int | None,
                     handles: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {'uuid': uuidutils.generate_uuid(),
             'deployable_id': deployable_id, 'cpid_id': cpid_id,
             'in_use': False, 'attach_type': handle['attach_type'],
             'attach_info': device_tree.canonical_json(handle['attach_info']),
             'created_at': self.now} for handle in handles]

    def _add_handles(self, deployable_id: int, cpid_id: int,
                     handles: list[dict[str, Any]]) -> None:
        """Insert handles with one statement."""
        if handles:
            self.connection.execute(sa.insert(HANDLES), self._handle_rows(
                deployable_id, cpid_id, handles))

    def _sync_handles(self, deployable_id: int, cpid_id: int,
                      wanted: list[dict[str, Any]],
                      held: set[str] = frozenset()) -> bool:
        """Handles are the same when their identities are (see
        :func:`cyborg.domain.adoption.handle_identity`); a free one
        takes the reported spelling of its info, one in use keeps what
        Nova was given. Handles ``held`` by other rows are not added."""
        rows = self._children(self.handles, 'deployable_id', deployable_id)
        wanted_by_text = {device_tree.canonical_json(h['attach_info']): h
                          for h in wanted}
        if held or {row.attach_info for row in rows} != set(wanted_by_text):
            existing = {adoption.handle_identity(row.attach_info): row
                        for row in rows}
            wanted_by_key = {adoption.handle_identity(h['attach_info']): h
                             for h in wanted}
        else:
            # Spelt alike (every report after the first): no parsing.
            existing = {row.attach_info: row for row in rows}
            wanted_by_key = wanted_by_text
        new = [handle for key, handle in wanted_by_key.items()
               if key not in existing and key not in held]
        self._add_handles(deployable_id, cpid_id, new)
        changed = bool(new)
        for key, handle in wanted_by_key.items():
            row = existing.get(key)
            if row is None:
                continue
            values = {}
            if row.attach_type != handle['attach_type']:
                values['attach_type'] = handle['attach_type']
            info = device_tree.canonical_json(handle['attach_info'])
            # A handle in use keeps the info Nova was given for the instance;
            # the new spelling is taken once it is released.
            if row.attach_info != info and not row.in_use:
                values['attach_info'] = info
            if values:
                self.connection.execute(sa.update(HANDLES).where(
                    HANDLES.c.id == row.id).values(updated_at=self.now,
                                                   **values))
                changed = True
        stale = [row.id for key, row in existing.items()
                 # A handle in use is never deleted under an instance; the
                 # first report after its release removes it.
                 if key not in wanted_by_key and not row.in_use]
        if stale:
            self.connection.execute(sa.delete(HANDLES).where(
                HANDLES.c.id.in_(stale)))
            changed = True
        return changed

    # Attributes

    def _attribute_rows(self, deployable_id: int,
                        values: dict[str, str]) -> list[dict[str, Any]]:
        return [{'uuid': uuidutils.generate_uuid(),
                 'deployable_id': deployable_id, 'key': key, 'value': value,
                 'created_at': self.now} for key, value in values.items()]

    def _add_attributes(self, deployable_id: int,
                        values: dict[str, str]) -> None:
        """Insert attributes with one statement."""
        if values:
            self.connection.execute(sa.insert(ATTRIBUTES),
                                    self._attribute_rows(deployable_id,
                                                         values))

    def _sync_attributes(self, deployable_id: int,
                         wanted: dict[str, str]) -> bool:
        existing = {row.key: row for row in self._children(
            self.attributes, 'deployable_id', deployable_id)}
        new = {key: value for key, value in wanted.items()
               if key not in existing}
        self._add_attributes(deployable_id, new)
        changed = bool(new)
        for key, value in wanted.items():
            row = existing.get(key)
            if row is not None and row.value != value:
                self.connection.execute(sa.update(ATTRIBUTES).where(
                    ATTRIBUTES.c.id == row.id).values(value=value,
                                                      updated_at=self.now))
                changed = True
        stale = [row.id for key, row in existing.items()
                 # Only the keys the report owns (resource class, traits) are
                 # removed; attributes an operator set stay.
                 if key not in wanted and providers.shapes_placement(key)]
        if stale:
            self.connection.execute(sa.delete(ATTRIBUTES).where(
                ATTRIBUTES.c.id.in_(stale)))
            changed = True
        return changed
