"""Fixtures for unit tests: a private config and a SQLite database."""

from oslo_config import cfg
import pytest

from cyborg.common import rpc
from cyborg import conf as cyborg_conf
from cyborg.conf import opts as conf_opts
from cyborg import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import migration


@pytest.fixture
def conf():
    """The global CONF, parsed with no files, reset after the test."""
    conf = cyborg_conf.CONF
    conf_opts.set_lib_defaults()
    rpc.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    yield conf
    conf.reset()
    conf.clear_override('connection', group='database')


@pytest.fixture
def database(conf, tmp_path):
    """A migrated SQLite database the DB API is configured for."""
    conf.set_override(
        'connection',
        'sqlite:///%s' % (tmp_path / 'db.sqlite'),
        group='database',
    )
    db_api.configure(conf)
    migration.upgrade()
    yield db_api.get_engine()
    db_api.get_engine().dispose()


@pytest.fixture
def admin_context():
    return cyborg_context.get_admin_context()


def make_context(roles=('member', 'reader'), project_id='p1', **kwargs):
    return cyborg_context.RequestContext(
        roles=list(roles), project_id=project_id, user_id='u1', **kwargs
    )


@pytest.fixture
def fresh_conf():
    """A ConfigOpts separate from the global one."""
    conf = cfg.ConfigOpts()
    for module in (
        cyborg_conf.default,
        cyborg_conf.api,
        cyborg_conf.conductor,
        cyborg_conf.agent,
        cyborg_conf.database,
    ):
        module.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    return conf
