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
"""cyborg-manage: operator commands on cyborg's records.

``cyborg-manage host delete HOST [--force]`` retires a compute host whose
agent is gone (see :func:`delete_host`).
``cyborg-manage upstream-import --source URL [--dry-run]`` copies an
upstream OpenStack Cyborg database into this service's (see
:mod:`cyborg.db.upstream_import`).
``cyborg-manage usage audit --period-start TIME`` creates the usage
records of an ended audit period the conductors left out (see
:func:`usage_audit_command`).
``cyborg-manage host capture --output FILE.tar.gz`` and ``cyborg-manage
host check`` read this host as its agent's drivers do, without the
database (see :mod:`cyborg.hostcapture.commands`).
``cyborg-manage audit allocations`` lists the Placement allocations of
this service's providers that no accelerator request holds, and the
accelerator requests whose instance Placement no longer knows (see
:func:`audit_allocations_command`).
Exit status: 0 done, 1 refused or failed (one line saying why; for host
check, a check that fails), 2 bad arguments, 3 the allocation audit
found something.
"""

import datetime
import sys

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.clients import placement as placement_client
from cyborg.common import config
from cyborg.common import exception
from cyborg.conductor import quotas
from cyborg.conf import CONF
from cyborg.db import allocation_audit as audit_db
from cyborg.db import api as db_api
from cyborg.db import errors as db_errors
from cyborg.db import hosts
from cyborg.db import upstream_import
from cyborg.db import usage as usage_db
from cyborg.domain import allocation_audit
from cyborg.domain import usage
from cyborg.hostcapture import commands as host_commands

PROG = 'cyborg-manage'


class Refused(Exception):
    """The command did not do its work; the message says why, in one
    line."""


def _remove_providers(client: placement_client.PlacementClient,
                      record: hosts.HostRecord) -> int:
    """Delete the host's providers from Placement, children first; the
    number that existed. A provider already gone counts as deleted."""
    removed = 0
    for provider in record.providers:
        try:
            if client.delete_provider(provider.uuid):
                removed += 1
        except placement_client.ProviderHasChildren as e:
            raise Refused(
                'Resource provider %s of host %s has child providers that '
                'cyborg did not create (%s): delete them first; nothing '
                'was deleted from the database.'
                % (provider.uuid, record.host, e.detail or e))
        except placement_client.ProviderInUse as e:
            raise Refused(
                'Resource provider %s of host %s is still in use in '
                'Placement (%s): remove the allocations of the instances '
                'on that host (delete or evacuate them), then run this '
                'again; nothing was deleted from the database.'
                % (provider.uuid, record.host, e.detail or e))
        except placement_client.PlacementError as e:
            raise Refused('Cannot delete resource provider %s of host %s '
                          'from Placement: %s; nothing was deleted from the '
                          'database, run this again.'
                          % (provider.uuid, record.host, e))
    return removed


def _placement_client(conf, purpose: str = 'delete the host\'s resource '
                                           'providers'
                      ) -> placement_client.PlacementClient:
    if not conf.placement.auth_type:
        raise Refused('[placement] is not configured (no auth_type): '
                      'cannot %s.' % purpose)
    return placement_client.PlacementClient.from_conf(conf)


def delete_host(context, host: str, force: bool = False,
                client_factory=_placement_client
                ) -> tuple[int, dict[str, int]]:
    """Retire ``host``: its resource providers in Placement, then all of
    its rows in one transaction; (providers deleted from Placement, rows
    deleted per table).

    Raises :class:`Refused` when the host is unknown, when a request
    holds or binds one of its devices, or when one of its services sent
    a heartbeat within ``[DEFAULT] service_down_time`` (unless
    ``force``). Placement is done first, so a failure part way leaves
    the database as it was and the command can be run again; a provider
    already gone from Placement is fine.
    """
    record = hosts.host_record(context, host)
    if not record.known:
        raise Refused('Host %s is unknown: no cyborg service, device or '
                      'resource provider is recorded for it.' % host)
    if record.blocking_arqs:
        raise Refused(str(hosts.HostInUse(host, record.blocking_arqs)))
    alive = record.alive_services(timeutils.utcnow(), CONF.service_down_time)
    if alive and not force:
        raise Refused(
            'Host %s looks alive: %s sent a heartbeat within the last %d '
            'seconds ([DEFAULT] service_down_time); stop its services '
            'first, or pass --force if they are gone for good.'
            % (host, ', '.join(alive), CONF.service_down_time))
    removed = 0
    if record.providers:
        removed = _remove_providers(client_factory(CONF), record)
    try:
        deleted = hosts.delete_host(context, host)
    except hosts.HostInUse as e:
        raise Refused('%s (It became so while this ran: its resource '
                      'providers are gone from Placement and come back at '
                      'the next sync of the host.)' % e)
    return removed, deleted


def _host_delete() -> int:
    host = CONF.command.hostname
    removed, deleted = delete_host(cyborg_context.get_admin_context(), host,
                                   force=CONF.command.force)
    print('Deleted host %s: %d resource provider(s) from Placement; '
          'database rows: %s.' % (host, removed, ', '.join(
              '%s %d' % (table, number)
              for table, number in deleted.items())))
    return 0


def upstream_import_command(source: str, dry_run: bool,
                            out=sys.stdout) -> int:
    """Import (or, dry, plan the import of) the upstream database at
    ``source`` into the configured database; prints the report."""
    try:
        report = upstream_import.import_database(
            source, db_api.get_engine(), dry_run=dry_run)
    except upstream_import.ImportRefused as e:
        print('\n'.join(e.report.lines()), file=out)
        raise Refused('%s See "Cannot import" above (--dry-run lists '
                      'the same).' % e)
    except upstream_import.Refused as e:
        raise Refused(str(e))
    print('\n'.join(report.lines()), file=out)
    if dry_run:
        print('Dry run: nothing was written.', file=out)
    else:
        print('Imported revision %s from %s: %s.' % (
            report.revision, report.source, ', '.join(
                '%s %d' % item for item in report.imported_rows.items())),
              file=out)
    return 0


def _upstream_import() -> int:
    return upstream_import_command(CONF.command.source, CONF.command.dry_run)


def _utc(text: str) -> datetime.datetime:
    """``text`` (ISO 8601; UTC unless it has an offset) as naive UTC."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise Refused('%r is not a time in ISO 8601 (e.g. '
                      '2030-01-01T10:00:00Z)' % text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(
            tzinfo=None)
    return moment


def usage_audit_command(context, period_start: str, length: int,
                        now: datetime.datetime, out=sys.stdout) -> int:
    """Create the usage records of the ended period of ``length``
    seconds starting at ``period_start``, for the conductors to send.

    For periods the conductors did not audit (they catch up with the
    latest ones only): refused for a time that starts no period, a
    period that has not ended, and one that overlaps an audited period
    or ends after the last one audited (the conductors audit from
    there on).
    """
    start = _utc(period_start)
    if usage.period_start(start, length) != start:
        raise Refused('%s starts no audit period: periods of %d seconds '
                      '([notifications] audit_period) start at multiples '
                      'of it since the Unix epoch, e.g. %s' % (
                          period_start, length, usage.timestamp(
                              usage.period_start(start, length))))
    end = start + datetime.timedelta(seconds=length)
    if end > now:
        raise Refused('the period %s to %s has not ended yet' % (
            usage.timestamp(start), usage.timestamp(end)))
    last_end = usage_db.last_audited_end(context)
    if last_end is not None and end > last_end:
        raise Refused('the period %s to %s ends after the last period '
                      'audited (which ended %s): the conductors audit it' % (
                          usage.timestamp(start), usage.timestamp(end),
                          usage.timestamp(last_end)))
    # Not leased: any conductor's next audit run sends them.
    records = usage_db.audit_period(context, start, end, now, PROG, None)
    if records is None:
        raise Refused('the period %s to %s, or one overlapping it, was '
                      'audited already' % (usage.timestamp(start),
                                           usage.timestamp(end)))
    print('Created %d usage records of %s to %s; the conductors send them.'
          % (len(records), usage.timestamp(start), usage.timestamp(end)),
          file=out)
    return 0


def _usage_audit() -> int:
    return usage_audit_command(cyborg_context.get_admin_context(),
                               CONF.command.period_start,
                               CONF.notifications.audit_period,
                               timeutils.utcnow())


# Exit status of an allocation audit that found something.
FOUND = 3


def audit_allocations_command(context,
                              client: placement_client.PlacementClient,
                              out=sys.stdout) -> int:
    """Print each allocation of this service's providers that no ARQ
    holds and each ARQ whose instance Placement no longer knows (see
    :mod:`cyborg.domain.allocation_audit`), then a count; :data:`FOUND`
    when there is any, else 0. Reads only: the operator decides (delete
    the instance, or its allocation with ``openstack resource provider
    allocation delete``; an ARQ through ``DELETE
    /v2/accelerator_requests``)."""
    providers = audit_db.providers(context)
    arqs = audit_db.held_arqs(context)
    allocations = {}
    try:
        for provider in providers:
            try:
                held = client.provider_allocations(provider.rp_uuid)
                allocations[provider.rp_uuid] = {
                    consumer: value['resources']
                    for consumer, value in held.items()}
            except placement_client.ProviderNotFound:
                continue  # not synced yet: nothing can be allocated
        unknown = {instance for instance in
                   allocation_audit.instances_to_check(allocations, arqs)
                   if not client.consumer_allocations(instance)}
    except placement_client.PlacementError as e:
        raise Refused('cannot read the allocations from Placement: %s' % e)
    orphans = allocation_audit.orphan_allocations(providers, allocations,
                                                  arqs)
    stale = allocation_audit.orphan_arqs(arqs, unknown)
    for finding in [*orphans, *stale]:
        print(finding.describe(), file=out)
    print('%d allocation(s) without an ARQ, %d ARQ(s) without a consumer '
          '(%d provider(s), %d ARQ(s) holding an instance checked).'
          % (len(orphans), len(stale), len(allocations), len(arqs)),
          file=out)
    return FOUND if orphans or stale else 0


def _audit_allocations() -> int:
    return audit_allocations_command(
        cyborg_context.get_admin_context(),
        _placement_client(CONF, 'read the allocations'))


def limits_check_command(context, conf, limits=None,
                         out=sys.stdout) -> int:
    """Print each resource a device profile uses (and
    accelerator_requests) that has no registered limit in Keystone, and
    what that means under [quota] unified_limits_resource_strategy; 1
    when there is one."""
    try:
        missing = quotas.unregistered_limits(context, conf, limits)
    except exception.QuotaUnavailable as e:
        raise Refused(str(e))
    for line in quotas.describe_unregistered(missing):
        print(line, file=out)
    if not missing:
        print('Every resource the device profiles use has a registered '
              'limit.', file=out)
    return 1 if missing else 0


def _limits_check() -> int:
    return limits_check_command(cyborg_context.get_admin_context(), CONF)


def _host_capture() -> int:
    return host_commands.capture_command(
        CONF, CONF.command.output, host_root=CONF.command.host_root,
        mask=CONF.command.mask)


def _host_check() -> int:
    return host_commands.check_command(
        CONF, host_root=CONF.command.host_root, as_json=CONF.command.json)


# Host commands that read the host, not the database.
HOST_READERS = ('capture', 'check')


def _database_use() -> str | None:
    """The database the parsed command needs (see
    :func:`cyborg.common.config.check`)."""
    if CONF.command.name == 'host' and CONF.command.action in HOST_READERS:
        return None
    return config.DATABASE_EXISTING


def _add_host_readers(actions) -> None:
    host_root = dict(
        metavar='DIR', default=None,
        help='Read the host under DIR, or the capture DIR names (a '
             'directory or its .tar.gz archive), instead of [agent] '
             'host_root.')
    capture = actions.add_parser(
        'capture', help='Capture what the enabled drivers read on this '
                        'host and the output of the vendor commands they '
                        'run into an archive; reads only.')
    capture.add_argument('--output', required=True, metavar='FILE.tar.gz',
                         help='The archive to write.')
    capture.add_argument('--mask', action='store_true',
                         help='Replace serial numbers and MAC addresses.')
    capture.add_argument('--host-root', **host_root)
    capture.set_defaults(func=_host_capture)
    check = actions.add_parser(
        'check', help='Show what each enabled driver would report on this '
                      'host, what it leaves out and why; exit status 1 '
                      'when a driver fails or matches nothing.')
    check.add_argument('--host-root', **host_root)
    check.add_argument('--json', action='store_true',
                       help='Print the check as JSON.')
    check.set_defaults(func=_host_check)


def _add_commands(subparsers):
    host = subparsers.add_parser('host', help='Manage compute hosts.')
    actions = host.add_subparsers(title='Host commands', dest='action')
    actions.required = True
    delete = actions.add_parser(
        'delete', help='Retire a host whose agent is gone: delete its '
                       'devices, its records and its resource providers in '
                       'Placement.')
    delete.add_argument('hostname', metavar='HOST',
                        help='The host, as its agent reported it '
                             '([DEFAULT] host on that host).')
    delete.add_argument('--force', action='store_true',
                        help='Delete the host even if one of its services '
                             'sent a heartbeat recently.')
    delete.set_defaults(func=_host_delete)
    _add_host_readers(actions)
    upstream = subparsers.add_parser(
        'upstream-import',
        help='Copy an upstream OpenStack Cyborg database into this '
             'service\'s database (migrated, with no devices or '
             'accelerator requests); the source is only read.')
    upstream.add_argument('--source', required=True, metavar='URL',
                          help='SQLAlchemy URL of the upstream database '
                               '(its [database] connection).')
    upstream.add_argument('--dry-run', action='store_true',
                          help='Print what would be imported and what '
                               'cannot be; write nothing.')
    upstream.set_defaults(func=_upstream_import)
    usage_parser = subparsers.add_parser(
        'usage', help='Manage the usage records (accelerator_request.exists).')
    usage_actions = usage_parser.add_subparsers(title='Usage commands',
                                                dest='action')
    usage_actions.required = True
    audit = usage_actions.add_parser(
        'audit', help='Create the usage records of an ended audit period '
                      'that the conductors left out; the conductors send '
                      'them.')
    audit.add_argument('--period-start', required=True, metavar='TIME',
                       help='The start of the period, ISO 8601 (UTC unless '
                            'an offset is given), e.g. 2030-01-01T10:00:00Z.')
    audit.set_defaults(func=_usage_audit)
    audit_parser = subparsers.add_parser(
        'audit', help='Compare Placement with the accelerator requests.')
    audit_actions = audit_parser.add_subparsers(title='Audit commands',
                                                dest='action')
    audit_actions.required = True
    allocations = audit_actions.add_parser(
        'allocations', help='List the allocations of this service\'s '
                            'resource providers that no accelerator request '
                            'holds, and the accelerator requests whose '
                            'instance Placement no longer knows; exit status '
                            '3 when there is any. Changes nothing.')
    allocations.set_defaults(func=_audit_allocations)


    limits_parser = subparsers.add_parser(
        'limits', help='Check the per-project limits in Keystone.')
    limits_actions = limits_parser.add_subparsers(title='Limits commands',
                                                  dest='action')
    limits_actions.required = True
    limits_check = limits_actions.add_parser(
        'check', help='List each resource a device profile uses (and '
                      'accelerator_requests) without a registered limit '
                      'in Keystone ([oslo_limit]), and what that means '
                      'under [quota] unified_limits_resource_strategy; '
                      'exit status 1 when there is one.')
    limits_check.set_defaults(func=_limits_check)


def main(argv: list[str] | None = None) -> int:
    CONF.register_cli_opt(cfg.SubCommandOpt('command', title='Commands',
                                            handler=_add_commands))
    # The program's name, also when run as ``python -m``.
    config.prepare_service([PROG] + (argv or sys.argv)[1:],
                           database=_database_use)
    if _database_use() is not None:
        db_api.configure(CONF)
    try:
        return CONF.command.func()
    except (Refused, host_commands.CommandFailed) as e:
        print('%s: %s' % (PROG, e), file=sys.stderr)
        return 1
    except db_errors.DATABASE_ERRORS as e:
        print('%s: database error: %s' % (PROG, str(e).splitlines()[0]),
              file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
