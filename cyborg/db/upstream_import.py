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

"""Importing an upstream OpenStack Cyborg database
(``cyborg-manage upstream-import``).

:func:`import_database` reads the source (reflected tables, SQLAlchemy
Core, in one read-only transaction that it never commits: the source is
never written), plans every row of ours (:func:`plan`, with the rules of
:mod:`cyborg.domain.upstream`: the ARQ state mapping, device addresses,
duplicate attributes) and, unless asked for a dry run, writes them in
ONE transaction of the target, so that a failure part way leaves the
target as it was.

What is kept: every uuid; device profiles (name, groups, description);
devices (type, vendor, model, board infos, hostname, status); control
path ids and attach handles (their JSON in our canonical form);
deployables (name, ``num_accelerators``, ``rp_uuid``, driver name,
bitstream); attributes; ARQs (project, profile and group, hostname,
``device_rp_uuid``, instance, handle, deployable). Integer ids are new
and foreign keys follow. What is derived: ``devices.address`` (from the
PCI control path id), one ``cyborg-agent`` service per host (no report
hash, so the first report of its agent is applied in full), one adopted
``placement_providers`` row per deployable with a resource provider, a
``failed`` Nova event per interrupted bind, and the ``upstream_imports``
row that makes a second import refuse.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Iterable
import dataclasses
import datetime
import json
from typing import Any

from alembic import migration as alembic_migration
from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.common import constants
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import nova_events
from cyborg.domain import device_tree
from cyborg.domain import devices as device_rules
from cyborg.domain import upstream

# Rows per INSERT statement (executemany).
CHUNK = 5000


class Refused(Exception):
    """The import did not run; the message says why, in one line."""


def source_engine(url: str) -> sa.engine.Engine:
    """An engine on the source whose sessions are read-only where the
    database allows it (PostgreSQL, MySQL/MariaDB), so that not even a
    bug could write the source."""
    parsed = sa.engine.make_url(url)
    backend = parsed.get_backend_name()
    kwargs: dict[str, Any] = {'poolclass': sa.pool.NullPool}
    if backend == 'postgresql':
        kwargs['connect_args'] = {
            'options': '-c default_transaction_read_only=on'}
    engine = sa.create_engine(parsed, **kwargs)
    if backend in ('mysql', 'mariadb'):
        @sa.event.listens_for(engine, 'connect')
        def read_only(dbapi_connection, record):
            cursor = dbapi_connection.cursor()
            cursor.execute('SET SESSION TRANSACTION READ ONLY')
            cursor.close()
    return engine


def shown_url(url: str) -> str:
    """``url`` with its password hidden; :class:`Refused` if it is not
    a URL (without repeating it: it may hold a password)."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        raise Refused('the source is not a SQLAlchemy database URL '
                      '(e.g. mysql+pymysql://USER:PASSWORD@HOST/cyborg)')


def source_revision(connection) -> str | None:
    """The source's alembic revision; None without a version table."""
    if not sa.inspect(connection).has_table('alembic_version'):
        return None
    return alembic_migration.MigrationContext.configure(
        connection).get_current_revision()


def read_source(connection) -> dict[str, list[dict[str, Any]]]:
    """Every row of upstream's tables (copied and skipped), by id."""
    names = upstream.COPIED_TABLES + upstream.SKIPPED_TABLES
    metadata = sa.MetaData()
    present = set(sa.inspect(connection).get_table_names())
    missing = [name for name in upstream.COPIED_TABLES
               if name not in present]
    if missing:
        raise Refused('the source has no table %s: it is not an upstream '
                      'OpenStack Cyborg database' % ', '.join(missing))
    metadata.reflect(bind=connection,
                     only=[name for name in names if name in present])
    rows = {}
    for name in names:
        if name not in metadata.tables:
            rows[name] = []
            continue
        table = metadata.tables[name]
        rows[name] = [dict(row) for row in connection.execute(
            sa.select(table).order_by(table.c.id)).mappings()]
    return rows


@dataclasses.dataclass
class Plan:
    """The rows to write, per table of ours. A foreign key is held as
    the uuid of the row it points to (under ``_ref`` keys) until the
    parents are written and have ids."""

    rows: dict[str, list[dict[str, Any]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list))
    #: (arq uuid, instance uuid) of the interrupted binds.
    failed_events: list[tuple[str, str]] = dataclasses.field(
        default_factory=list)


def _problem(report: upstream.ImportReport, what: str, uuid: str,
             error: Exception | str) -> None:
    report.problems.append('%s %s: %s' % (what, uuid, error))


def _duplicates(report: upstream.ImportReport, what: str,
                keys: dict[tuple, list[str]], meaning: str) -> None:
    """A problem per key that more than one row has."""
    for key, uuids in keys.items():
        if len(uuids) > 1:
            report.problems.append('%s %s: %s %s' % (
                what, ', '.join(uuids), meaning, ' '.join(map(str, key))))


def _stamps(row: dict[str, Any]) -> dict[str, Any]:
    return {'created_at': row.get('created_at'),
            'updated_at': row.get('updated_at')}


def _plan_profiles(source, plan: Plan, report) -> dict[int, str]:
    uuids = {}
    for row in source['device_profiles']:
        uuids[row['id']] = row['uuid']
        try:
            upstream.profile_groups(row['profile_json'])
        except upstream.Unmappable as e:
            _problem(report, 'device profile', row['uuid'], e)
        plan.rows['device_profiles'].append(dict(
            uuid=row['uuid'], name=row['name'],
            profile_json=row['profile_json'],
            description=row.get('description'), **_stamps(row)))
    return uuids


def _plan_cpids(device: str, cpids: list[dict[str, Any]], plan: Plan,
                report) -> list[Any]:
    """The control path ids of ``device``; their PCI infos, parsed."""
    infos, seen = [], collections.defaultdict(list)
    for cpid in cpids:
        try:
            info = upstream.canonical(cpid['cpid_info'], 'cpid_info')
        except upstream.Unmappable as e:
            _problem(report, 'control path id', cpid['uuid'], e)
            continue
        seen[(info,)].append(cpid['uuid'])
        if cpid['cpid_type'] == 'PCI':
            infos.append(upstream.parse_json(info, 'cpid_info'))
        plan.rows['controlpath_ids'].append(dict(
            uuid=cpid['uuid'], _device=device, cpid_type=cpid['cpid_type'],
            cpid_info=info, **_stamps(cpid)))
    _duplicates(report, 'control path ids', seen,
                'of device %s have the same info' % device)
    return infos


def _plan_devices(source, plan: Plan, report) -> dict[int, str]:
    """Devices and their control path ids; upstream device id -> uuid."""
    cpids = collections.defaultdict(list)
    for row in source['controlpath_ids']:
        cpids[row['device_id']].append(row)
    uuids = {}
    addresses = collections.defaultdict(list)
    for row in source['devices']:
        uuids[row['id']] = row['uuid']
        infos = _plan_cpids(row['uuid'], cpids[row['id']], plan, report)
        try:
            address = upstream.device_address(infos)
        except upstream.Unmappable as e:
            _problem(report, 'device', row['uuid'], e)
            continue
        addresses[(row['hostname'], address)].append(row['uuid'])
        if row['type'] not in device_tree.DEVICE_TYPES:
            report.adjustments.append(
                'device %s: type %s is not one of ours (%s); kept until '
                'its agent reports the device' % (
                    row['uuid'], row['type'],
                    ', '.join(device_tree.DEVICE_TYPES)))
        report.hosts[row['hostname']] = report.hosts.get(
            row['hostname'], 0) + 1
        plan.rows['devices'].append(dict(
            uuid=row['uuid'], type=row['type'], vendor=row['vendor'],
            model=row['model'], std_board_info=row.get('std_board_info'),
            vendor_board_info=row.get('vendor_board_info'),
            hostname=row['hostname'], address=address,
            status=row.get('status') or device_rules.ENABLED,
            health=device_tree.Health.HEALTHY.value, driver=None,
            missing=False, health_reason=device_rules.REASON_IMPORTED,
            **_stamps(row)))
    _duplicates(report, 'devices', addresses,
                'have the same host and PCI address:')
    return uuids


def _plan_deployables(source, plan: Plan, report,
                      device_uuids: dict[int, str]) -> dict[int, dict]:
    """Deployables and their providers; upstream id -> row of ours."""
    hosts = {row['id']: row['hostname'] for row in source['devices']}
    deployables, names = {}, collections.defaultdict(list)
    providers = collections.defaultdict(list)
    for row in source['deployables']:
        if row.get('parent_id') is not None or row.get('root_id') is not None:
            report.adjustments.append(
                'deployable %s: its parent/root (unused by upstream) is '
                'not imported' % row['uuid'])
        names[(device_uuids[row['device_id']], row['name'])].append(
            row['uuid'])
        ours = dict(uuid=row['uuid'], _device=device_uuids[row['device_id']],
                    name=row['name'],
                    num_accelerators=row['num_accelerators'],
                    rp_uuid=row.get('rp_uuid'),
                    driver_name=row.get('driver_name'),
                    bitstream_id=row.get('bitstream_id'), parent_id=None,
                    root_id=None,
                    preparation=device_tree.Preparation.NONE.value,
                    retained=False, **_stamps(row))
        deployables[row['id']] = ours
        plan.rows['deployables'].append(ours)
        if row.get('rp_uuid'):
            providers[(row.get('rp_uuid'),)].append(row['uuid'])
            plan.rows['placement_providers'].append(dict(
                uuid=row.get('rp_uuid'), host=hosts[row['device_id']],
                name=row['name'], parent_uuid='', generation=None,
                inventory_hash=None, traits_hash=None, adopted=True))
    _duplicates(report, 'deployables', names,
                'have the same device and name:')
    _duplicates(report, 'deployables', providers,
                'have the same resource provider:')
    return deployables


def _plan_attributes(source, plan: Plan, report,
                     deployables: dict[int, dict]) -> None:
    by_key = collections.defaultdict(list)
    for row in source['attributes']:
        by_key[(row['deployable_id'], row['key'])].append(row)
    for (deployable_id, key), rows in by_key.items():
        kept = upstream.newest(rows)
        deployable = deployables[deployable_id]['uuid']
        if len(rows) > 1:
            report.adjustments.append(
                'deployable %s: attribute %r is set %d times; the newest '
                '(%s, %r) is kept' % (deployable, key, len(rows),
                                      kept['uuid'], kept['value']))
        if len(key) > 255:
            _problem(report, 'attribute', kept['uuid'],
                     'key longer than 255 characters')
        plan.rows['attributes'].append(dict(
            uuid=kept['uuid'], _deployable=deployable, key=key,
            value=kept['value'], **_stamps(kept)))


def _profile_groups(source) -> dict[tuple[int, int], str]:
    """Each (upstream profile id, group index) -> the group as an ARQ
    keeps it (a profile that cannot be mapped is reported elsewhere)."""
    found = {}
    for row in source['device_profiles']:
        try:
            groups = upstream.profile_groups(row['profile_json'])
        except upstream.Unmappable:
            continue
        for index, group in enumerate(groups):
            found[row['id'], index] = json.dumps(group, sort_keys=True)
    return found


def _plan_arqs(source, plan: Plan, report, profile_uuids,
               deployables) -> dict[int, str]:
    """ARQs; upstream handle id -> uuid of the ARQ that keeps it."""
    handles = {row['id']: row['uuid'] for row in source['attach_handles']}
    groups = _profile_groups(source)
    holders = collections.defaultdict(list)
    kept: dict[int, str] = {}
    for row in source['extended_accelerator_requests']:
        try:
            state = upstream.mapped_state(row['state'])
        except upstream.Unmappable as e:
            _problem(report, 'accelerator request', row['uuid'], e)
            continue
        report.count_state(row['state'], state)
        handle_id, bind_error = row.get('attach_handle_id'), None
        deployable_id = row.get('deployable_id')
        if row['state'] in upstream.INTERRUPTED:
            handle_id, deployable_id = None, None
            bind_error = upstream.INTERRUPTED_BIND_ERROR
            if row.get('instance_uuid'):
                plan.failed_events.append((row['uuid'],
                                           row.get('instance_uuid')))
        elif handle_id is not None and state not in upstream.HOLDS_HANDLE:
            report.adjustments.append(
                'accelerator request %s (%s) held attach handle %s; '
                'imported without it' % (row['uuid'], row['state'],
                                         handles[handle_id]))
            handle_id = None
        if handle_id is not None:
            holders[(handles[handle_id],)].append(row['uuid'])
            kept[handle_id] = row['uuid']
        plan.rows['extended_accelerator_requests'].append(dict(
            uuid=row['uuid'], project_id=row.get('project_id'), state=state,
            _profile=profile_uuids[row['device_profile_id']],
            device_profile_group_id=row['device_profile_group_id'],
            group_json=groups.get((row['device_profile_id'],
                                   row['device_profile_group_id'])),
            hostname=row.get('hostname'),
            device_rp_uuid=row.get('device_rp_uuid'),
            instance_uuid=row.get('instance_uuid'),
            _handle=handles.get(handle_id),
            _deployable=(deployables[deployable_id]['uuid']
                         if deployable_id is not None else None),
            bind_owner=None, bind_started_at=None, bind_error=bind_error,
            **_stamps(row)))
    _duplicates(report, 'accelerator requests', holders,
                'hold the same attach handle:')
    return kept


def _plan_handles(source, plan: Plan, report, deployables,
                  held: dict[int, str]) -> None:
    cpids = {row['id']: row['uuid'] for row in source['controlpath_ids']}
    infos = collections.defaultdict(list)
    for row in source['attach_handles']:
        try:
            info = upstream.canonical(row['attach_info'], 'attach_info')
        except upstream.Unmappable as e:
            _problem(report, 'attach handle', row['uuid'], e)
            continue
        deployable = deployables[row['deployable_id']]['uuid']
        infos[(deployable, info)].append(row['uuid'])
        in_use = row['id'] in held
        if in_use != bool(row.get('in_use')):
            report.adjustments.append(
                'attach handle %s: in_use %s upstream, %s here (%s)' % (
                    row['uuid'], bool(row.get('in_use')), in_use,
                    'held by accelerator request %s' % held[row['id']]
                    if in_use else 'held by no bound accelerator request'))
        plan.rows['attach_handles'].append(dict(
            uuid=row['uuid'], _deployable=deployable,
            _cpid=cpids[row['cpid_id']], in_use=in_use,
            attach_type=row['attach_type'], attach_info=info,
            **_stamps(row)))
    _duplicates(report, 'attach handles', infos,
                'have the same deployable and attach info:')


def plan(source: dict[str, list[dict[str, Any]]],
         report: upstream.ImportReport) -> Plan:
    """Our rows for upstream's ``source`` rows (dicts by column; a NULL
    column may be left out); what was adjusted or cannot be imported
    goes to ``report``."""
    result = Plan()
    for name, rows in source.items():
        report.source_rows[name] = len(rows)
    profiles = _plan_profiles(source, result, report)
    device_uuids = _plan_devices(source, result, report)
    deployables = _plan_deployables(source, result, report, device_uuids)
    _plan_attributes(source, result, report, deployables)
    held = _plan_arqs(source, result, report, profiles, deployables)
    _plan_handles(source, result, report, deployables, held)
    for host in sorted(report.hosts):
        result.rows['services'].append(dict(
            host=host, binary=constants.BINARY_AGENT, report_hash=None,
            rp_name=host, compute_rp_uuid=None))
    for name in (upstream.COPIED_TABLES
                 + ('services', 'placement_providers')):
        report.imported_rows[name] = len(result.rows[name])
    report.imported_rows['nova_events'] = len(result.failed_events)
    return result


# The target ---------------------------------------------------------------

def _count(connection, table) -> int:
    return connection.execute(
        sa.select(sa.func.count()).select_from(table)).scalar_one()


def check_target(connection, new: Plan, report: upstream.ImportReport
                 ) -> None:
    """Raise :class:`Refused` unless the target is migrated to our head,
    holds no devices or ARQs and was never imported into; rows of the
    target that the import's would collide with go to ``report``."""
    revision = alembic_migration.MigrationContext.configure(
        connection).get_current_revision()
    if revision != migration.head():
        raise Refused('the target database is at revision %s, not %s: '
                      'run cyborg-dbsync upgrade first'
                      % (revision, migration.head()))
    previous = connection.execute(
        sa.select(models.UPSTREAM_IMPORTS).order_by(
            models.UPSTREAM_IMPORTS.c.id)).first()
    if previous is not None:
        raise Refused('the target database was imported into already, '
                      'from upstream revision %s (started %s, finished '
                      '%s); import into a new database' % (
                          previous.source_revision, previous.started_at,
                          previous.finished_at or 'never'))
    for table in (models.DEVICES, models.ARQS):
        number = _count(connection, table)
        if number:
            raise Refused('the target database has %d %s: import into a '
                          'database that has none' % (number, table.name))
    _collisions(connection, models.PROFILES, 'uuid',
                new.rows['device_profiles'], report)
    _collisions(connection, models.PROFILES, 'name',
                new.rows['device_profiles'], report)
    _collisions(connection, models.PROVIDERS, 'uuid',
                new.rows['placement_providers'], report)


def _collisions(connection, table, column: str, rows, report) -> None:
    values = {row[column] for row in rows}
    existing = [value for (value,) in connection.execute(
        sa.select(table.c[column]))]
    for value in sorted(values.intersection(existing)):
        report.problems.append('%s %s %s exists in the target already'
                               % (table.name, column, value))


def _insert(connection, table, rows: list[dict[str, Any]]) -> None:
    """``rows`` inserted, :data:`CHUNK` per executemany."""
    for start in range(0, len(rows), CHUNK):
        connection.execute(table.insert(), rows[start:start + CHUNK])


def _ids(connection, table, uuids: Iterable[str] | None = None
         ) -> dict[str, int]:
    """uuid -> id of ``table``'s rows (of ``uuids`` only, if given)."""
    query = sa.select(table.c.uuid, table.c.id)
    if uuids is not None:
        query = query.where(table.c.uuid.in_(list(uuids)))
    return dict(connection.execute(query).all())


def _resolved(rows, refs: dict[str, tuple[str, dict[str, int]]]):
    """``rows`` with their ``_ref`` uuids replaced by ids:
    ``refs`` maps each ``_ref`` key to (its column, uuid -> id)."""
    for row in rows:
        out = {key: value for key, value in row.items()
               if not key.startswith('_')}
        for ref, (column, ids) in refs.items():
            out[column] = ids[row[ref]] if row[ref] is not None else None
        yield out


def write(connection, new: Plan, report: upstream.ImportReport,
          started_at: datetime.datetime,
          step: Callable[[str], None] = lambda table: None) -> None:
    """Write ``new`` on ``connection`` (in the caller's transaction),
    parents first; ``step`` is called after each table."""
    rows = new.rows
    _insert(connection, models.PROFILES, rows['device_profiles'])
    step('device_profiles')
    profiles = _ids(connection, models.PROFILES,
                    (row['uuid'] for row in rows['device_profiles']))
    # Assumed healthy (see the plan) since the import.
    _insert(connection, models.DEVICES, [dict(row, health_since=started_at)
                                         for row in rows['devices']])
    step('devices')
    devices = _ids(connection, models.DEVICES)
    by_device = {'_device': ('device_id', devices)}
    _insert(connection, models.CPIDS,
            list(_resolved(rows['controlpath_ids'], by_device)))
    step('controlpath_ids')
    _insert(connection, models.DEPLOYABLES,
            list(_resolved(rows['deployables'], by_device)))
    step('deployables')
    deployables = _ids(connection, models.DEPLOYABLES)
    by_deployable = {'_deployable': ('deployable_id', deployables)}
    _insert(connection, models.ATTRIBUTES,
            list(_resolved(rows['attributes'], by_deployable)))
    step('attributes')
    _insert(connection, models.HANDLES, list(_resolved(
        rows['attach_handles'], dict(
            by_deployable, _cpid=('cpid_id', _ids(connection,
                                                  models.CPIDS))))))
    step('attach_handles')
    _insert(connection, models.ARQS, list(_resolved(
        rows['extended_accelerator_requests'], dict(
            by_deployable, _profile=('device_profile_id', profiles),
            _handle=('attach_handle_id', _ids(connection,
                                              models.HANDLES))))))
    step('extended_accelerator_requests')
    _write_services(connection, rows['services'])
    _insert(connection, models.PROVIDERS, rows['placement_providers'])
    now = timeutils.utcnow()
    nova_events.enqueue_many(
        connection, [(arq, instance, 'failed')
                     for arq, instance in new.failed_events], now)
    step('derived')
    connection.execute(models.UPSTREAM_IMPORTS.insert().values(
        source_revision=report.revision, started_at=started_at,
        finished_at=timeutils.utcnow(), counts=report.as_json(),
        created_at=now))


def _write_services(connection, rows: list[dict[str, Any]]) -> None:
    """The agents' service rows: new ones inserted; an existing one
    (an agent of ours that ran on the host before) made to apply its
    next report in full."""
    table = models.SERVICES
    existing = {host for (host,) in connection.execute(
        sa.select(table.c.host).where(
            table.c.binary == constants.BINARY_AGENT))}
    now = timeutils.utcnow()
    _insert(connection, table, [dict(row, created_at=now) for row in rows
                                if row['host'] not in existing])
    hosts = [row['host'] for row in rows if row['host'] in existing]
    if hosts:
        connection.execute(sa.update(table).where(
            table.c.binary == constants.BINARY_AGENT,
            table.c.host.in_(hosts)).values(report_hash=None,
                                            updated_at=now))


def _read(source_url: str, shown: str
          ) -> tuple[upstream.ImportReport, dict[str, list[dict]]]:
    """The source's rows, read in one read-only snapshot, and a report
    of its revision (:class:`Refused` if the import does not know it)."""
    engine = source_engine(source_url)
    try:
        with engine.connect() as connection:
            if engine.dialect.name != 'sqlite':
                # One snapshot of every table.
                connection.execution_options(
                    isolation_level='REPEATABLE READ')
            revision = source_revision(connection)
            if not upstream.revision_known(revision):
                raise Refused('%s: %s' % (
                    shown, upstream.unknown_revision_message(revision)))
            report = upstream.ImportReport(shown, revision)
            source = read_source(connection)
            connection.rollback()  # it only read
    finally:
        engine.dispose()
    return report, source


def import_database(source_url: str, target: sa.engine.Engine,
                    dry_run: bool = False,
                    step: Callable[[str], None] = lambda table: None
                    ) -> upstream.ImportReport:
    """Import the upstream database at ``source_url`` into ``target``
    (or only plan it, with ``dry_run``); the report.

    Raises :class:`Refused` for a source revision it does not know, a
    target it must not write, or rows it cannot import (listed in the
    message's report, see :class:`ImportRefused`).
    """
    started_at = timeutils.utcnow()
    shown = shown_url(source_url)
    try:
        report, source = _read(source_url, shown)
    except sa.exc.NoSuchModuleError as e:
        raise Refused('%s: no database driver for it: %s' % (shown, e))
    except sa.exc.SQLAlchemyError as e:
        error = getattr(e, 'orig', None) or e
        raise Refused('%s: cannot read the source: %s'
                      % (shown, str(error).strip().splitlines()[0]))
    new = plan(source, report)
    with target.connect() as connection:
        with connection.begin() as transaction:
            check_target(connection, new, report)
            if dry_run or report.problems:
                transaction.rollback()
                if report.problems and not dry_run:
                    raise ImportRefused(report)
                return report
            write(connection, new, report, started_at, step)
    return report


class ImportRefused(Refused):
    """Rows of the source cannot be imported; ``report`` lists them."""

    def __init__(self, report: upstream.ImportReport):
        super().__init__('%d problem(s) in the source prevent the import; '
                         'nothing was written.' % len(report.problems))
        self.report = report
