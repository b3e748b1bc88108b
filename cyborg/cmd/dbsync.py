"""cyborg-dbsync: create and upgrade the database schema."""

import sys

from oslo_config import cfg

from cyborg.common import config
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import migration


def _upgrade():
    migration.upgrade(CONF.command.revision)
    print('Database is at revision %s' % migration.version())


def _version():
    print(migration.version() or 'None (empty database)')


def _stamp():
    migration.stamp(CONF.command.revision)


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


def main(argv: list[str] | None = None) -> int:
    CONF.register_cli_opt(cfg.SubCommandOpt('command', title='Commands',
                                            handler=_add_commands))
    config.prepare_service(argv or sys.argv)
    db_api.configure(CONF)
    CONF.command.func()
    return 0
