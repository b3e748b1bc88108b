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

"""cyborg-dbsync: create, upgrade and maintain the database.

``upgrade``, ``version`` and ``stamp`` manage the schema;
``online_data_migrations`` migrates data while services run; ``purge``
deletes finished records. Bad arguments exit with status 2 and a
one-line message.
"""

import datetime
import re
import sys

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import config
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import errors as db_errors
from cyborg.db import migration
from cyborg.db import online_migrations
from cyborg.db import purge

PROG = 'cyborg-dbsync'
#: Rows deleted per transaction by ``purge`` unless told otherwise.
DEFAULT_PURGE_BATCH = 1000
#: The largest ``--older-than``: a cutoff before 1900 would purge the
#: same rows, and dates before year 1 cannot be written at all.
MAX_DAYS = 36500
_NON_NEGATIVE = re.compile(r'^[0-9]+$')


class UsageError(Exception):
    """A bad command line argument; its message is one line."""


def _upgrade():
    migration.upgrade(CONF.command.revision)
    print('Database is at revision %s' % migration.version())


def _version():
    print(migration.version() or 'None (empty database)')


def _stamp():
    migration.stamp(CONF.command.revision)


def integer_arg(option: str, value: str | None, minimum: int,
                maximum: int | None = None) -> int:
    """``value`` as an integer of at least ``minimum`` (and at most
    ``maximum``); UsageError if it is not one."""
    number = (int(value) if value is not None
              and _NON_NEGATIVE.match(value.strip()) else None)
    if number is None or number < minimum or (
            maximum is not None and number > maximum):
        what = ('a non-negative integer' if minimum == 0
                else 'an integer of at least %d' % minimum)
        if maximum is not None:
            what += ' and at most %d' % maximum
        raise UsageError('%s must be %s, not %r' % (option, what, value))
    return number


def print_table(headers: list[str], rows: list[list[object]]) -> None:
    """Print ``rows`` as a plain-text table under ``headers``."""
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    rule = '+' + '+'.join('-' * (width + 2) for width in widths) + '+'

    def line(row):
        return '| ' + ' | '.join(cell.ljust(width) for cell, width
                                 in zip(row, widths, strict=True)) + ' |'
    print('\n'.join([rule, line(cells[0]), rule]
                    + [line(row) for row in cells[1:]] + [rule]))


def run_purge(context, days: int, dry_run: bool, batch_size: int,
              now: datetime.datetime | None = None) -> int:
    """Delete (or, dry, count) the records finished more than ``days``
    days before ``now``; prints the counts per table. Exit status 0."""
    now = now or timeutils.utcnow()
    cutoff = purge.Cutoff(
        before=now - datetime.timedelta(days=days),
        down_since=now - datetime.timedelta(seconds=CONF.service_down_time))
    if dry_run:
        counts = purge.count(context, cutoff)
        verb = 'would be deleted (dry run)'
    else:
        counts = purge.purge(context, cutoff, batch_size)
        verb = 'deleted'
    print('Records finished before %s UTC:'
          % cutoff.before.isoformat(sep=' ', timespec='seconds'))
    for table, number in counts.items():
        print('%s: %d %s' % (table, number, verb))
    return 0


def _purge() -> int:
    days = integer_arg('--older-than', CONF.command.older_than, 0,
                       MAX_DAYS)
    batch_size = integer_arg('--batch-size', CONF.command.batch_size, 1)
    return run_purge(cyborg_context.get_admin_context(), days,
                     CONF.command.dry_run, batch_size)


def run_online_data_migrations(context, max_count: int | None,
                               migrations=None) -> int:
    """Run the online data migrations and print what they did.

    Exit status, as nova-manage's: 0 when nothing is left to migrate, 1
    while rows remain (``max_count`` stopped early, or a migration cannot
    finish yet: run it again), 2 when a migration failed.
    """
    if max_count is None:
        print('Running batches of %d until complete'
              % online_migrations.DEFAULT_BATCH)
    outcome = online_migrations.run(context, max_count, migrations)
    if outcome.totals:
        print_table(['Migration', 'Total Needed', 'Completed'],
                    [[name, totals.found, totals.done]
                     for name, totals in outcome.totals.items()])
    else:
        print('No online data migration is defined.')
    if outcome.failed:
        print('Some migrations failed unexpectedly (%s); see the log.'
              % ', '.join(outcome.failed))
        return 2
    if not outcome.complete:
        print('Some migrations have more rows to migrate; run the command '
              'again.')
        return 1
    print('All online data migrations are done.')
    return 0


def _online_data_migrations() -> int:
    max_count = CONF.command.max_count
    if max_count is not None:
        max_count = integer_arg('--max-count', max_count, 1)
    return run_online_data_migrations(cyborg_context.get_admin_context(),
                                      max_count)


def _database_use() -> str:
    """What the sub-command does with the database: ``upgrade`` and
    ``stamp`` create it, the others read an existing one."""
    if CONF.command.name in ('upgrade', 'stamp'):
        return config.DATABASE_NEW
    return config.DATABASE_EXISTING


def _add_commands(subparsers):
    parser = subparsers.add_parser('upgrade',
                                   help='Upgrade the schema (default: head).')
    parser.add_argument('--revision', default=None)
    parser.set_defaults(func=_upgrade)
    parser = subparsers.add_parser('version',
                                   help='Print the current revision.')
    parser.set_defaults(func=_version)
    parser = subparsers.add_parser('stamp',
                                   help='Mark the schema as at a revision '
                                        'without migrating.')
    parser.add_argument('--revision', required=True)
    parser.set_defaults(func=_stamp)
    parser = subparsers.add_parser(
        'purge', help='Delete records finished more than DAYS days ago '
                      '(sent Nova events, conductors gone).')
    parser.add_argument('--older-than', metavar='DAYS', required=True,
                        help='Age in days (a non-negative integer) of the '
                             'newest record to delete.')
    parser.add_argument('--dry-run', action='store_true',
                        help='Print what would be deleted; delete nothing.')
    parser.add_argument('--batch-size', metavar='N',
                        default=str(DEFAULT_PURGE_BATCH),
                        help='Rows deleted per transaction (default %d).'
                             % DEFAULT_PURGE_BATCH)
    parser.set_defaults(func=_purge)
    parser = subparsers.add_parser(
        'online_data_migrations',
        help='Run the online data migrations (before the next upgrade).')
    parser.add_argument('--max-count', metavar='N', default=None,
                        help='Migrate at most N rows, then stop (exit '
                             'status 1 if rows remain). Default: run '
                             'batches until all are migrated.')
    parser.set_defaults(func=_online_data_migrations)


def main(argv: list[str] | None = None) -> int:
    CONF.register_cli_opt(cfg.SubCommandOpt('command', title='Commands',
                                            handler=_add_commands))
    # The program's name, also when run as ``python -m``.
    config.prepare_service([PROG] + (argv or sys.argv)[1:],
                           database=_database_use, state_dir=True)
    db_api.configure(CONF)
    try:
        return CONF.command.func() or 0
    except UsageError as e:
        print('%s %s: %s' % (PROG, CONF.command.name, e), file=sys.stderr)
        return 2
    except db_errors.DATABASE_ERRORS as e:
        print('%s %s: database error: %s'
              % (PROG, CONF.command.name, str(e).splitlines()[0]),
              file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
