"""Database options: oslo.db's [database] group with cyborg defaults."""

from oslo_config import cfg
from oslo_db import options as db_options

DEFAULT_CONNECTION = 'sqlite:///$state_path/cyborg.sqlite'


def register_opts(conf: cfg.ConfigOpts) -> None:
    db_options.set_defaults(conf, connection=DEFAULT_CONNECTION)


def list_opts():
    return {}
