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

"""Per-project limits against the suite's real Keystone: registered and
project limits created through its API, read by oslo.limit, enforced by
the conductor's ARQ creation on PostgreSQL and on MariaDB.

The conductor's endpoint (``ConductorManager``) runs in this process,
called from threads as its RPC server would call it: the race that
matters is between database transactions, which these are.
"""

from __future__ import annotations

import io
import threading
import time
import uuid

from keystoneauth1 import loading
from oslo_limit import limit as oslo_limit
import oslo_messaging as messaging
import pytest

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.cmd import manage
from cyborg.common import exception
from cyborg.conductor import manager
from cyborg.conductor import quotas
from cyborg.conf import opts as conf_opts
from cyborg.db import api as db_api
from cyborg.db import device_profiles as profiles_db
from cyborg.db import migration
from cyborg.db import quotas as quotas_db
from tests.functional import keystone as keystone_server
from tests.functional import nova_flow

CONCURRENT = 100
LIMIT = 50
# Connections the creations share: the suite's PostgreSQL allows 100
# clients in all (Keystone and other tests hold some); the others wait
# for one, as requests wait for a conductor worker.
POOL = 30


class _Limits:
    """This module's own service in Keystone (not the deployments'
    ``accelerator``) and its limits."""

    def __init__(self, keystone):
        self.keystone = keystone
        name = 'quota-test-%s' % uuid.uuid4().hex[:8]
        self.service_id = keystone._request(
            'POST', '/services', ok=(201,), json={'service': {
                'type': name, 'name': name, 'enabled': True}})['service']['id']
        self.endpoint_id = keystone._request(
            'POST', '/endpoints', ok=(201,), json={'endpoint': {
                'service_id': self.service_id, 'interface': 'public',
                'url': 'http://127.0.0.1:9/%s' % name,
                'region_id': keystone_server.REGION,
                'enabled': True}})['endpoint']['id']

    def register(self, name: str, default: int) -> None:
        self.keystone.add_registered_limit(self.service_id, name, default)

    def set_project(self, project_id: str, name: str, value: int) -> str:
        return self.keystone.add_project_limit(self.service_id, project_id,
                                               name, value)

    def change(self, limit_id: str, value: int) -> None:
        self.keystone.change_project_limit(limit_id, value)


@pytest.fixture(scope='module')
def limits(keystone):
    limits = _Limits(keystone)
    limits.register('accelerator_requests', 1000)
    limits.register('class:FPGA', 10)
    return limits


@pytest.fixture(scope='module')
def database(db_server):
    name = 'quotas_%s_%s' % (nova_flow.database_kind(db_server),
                             uuid.uuid4().hex[:8])
    url = db_server.create_database(name)
    db_api.configure(_DBConf(url))
    migration.upgrade()
    admin = cyborg_context.get_admin_context()
    profiles_db.device_profile_create(admin, {
        'name': 'fpga', 'groups': [{'resources:FPGA': '1'}]})
    profiles_db.device_profile_create(admin, {
        'name': 'fpga-below-limit',
        'groups': [{'resources:FPGA': str(LIMIT - 1)}]})
    yield db_api.get_engine()
    db_api.get_engine().dispose()
    db_server.drop_database(name)


class _DBConf:
    def __init__(self, url):
        self.database = {'connection': url, 'max_pool_size': POOL,
                         'max_overflow': 0, 'pool_timeout': 60}


@pytest.fixture
def conf(keystone, limits, monkeypatch):
    """The global CONF with [quota] driver = unified_limits and
    [oslo_limit] reaching the suite's Keystone as its admin."""
    conf = cyborg_conf.CONF
    conf_opts.set_lib_defaults()
    conf([], project='cyborg', default_config_files=[])
    # What keystoneauth registers when it loads the plugin a config file
    # names (registered after the parse: they are required options).
    plugin_opts = loading.get_auth_plugin_conf_options('password')
    conf.register_opts(plugin_opts, group='oslo_limit')
    overrides = {
        'quota': {'driver': 'unified_limits'},
        'oslo_limit': keystone.oslo_limit_options(
            endpoint_id=limits.endpoint_id)}
    for group, values in overrides.items():
        for name, value in values.items():
            conf.set_override(name, value, group=group)
    # oslo.limit keeps one Keystone connection per process.
    monkeypatch.setattr(oslo_limit, '_SDK_CONNECTION', None)
    yield conf
    conf.reset()
    conf.clear_override('connection', group='database')
    for name in overrides['oslo_limit']:
        conf.clear_override(name, group='oslo_limit')
    conf.unregister_opts(plugin_opts, group='oslo_limit')


def _context(project_id: str):
    return cyborg_context.RequestContext(
        roles=['member', 'reader'], project_id=project_id, user_id='u1')


def _create(conductor, project_id: str, profile: str):
    """The ARQs created, or the exception the conductor answered."""
    try:
        return conductor.arq_create(_context(project_id), profile)
    except messaging.ExpectedException as e:
        return e.exc_info[1]


def test_concurrent_creates_at_the_limit_minus_one_make_exactly_one(
        conf, limits, database):
    project_id = limits.keystone.add_project('quota-%s' % uuid.uuid4().hex[:8])
    limits.set_project(project_id, 'class:FPGA', LIMIT)
    conductor = manager.ConductorManager('c1', quotas=quotas.from_conf(conf))
    assert len(_create(conductor, project_id, 'fpga-below-limit')) == LIMIT - 1

    start = threading.Barrier(CONCURRENT)
    results: list = [None] * CONCURRENT

    def create(index: int) -> None:
        start.wait()
        results[index] = _create(conductor, project_id, 'fpga')

    threads = [threading.Thread(target=create, args=(index,))
               for index in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    created = [r for r in results if isinstance(r, list)]
    refused = [r for r in results if isinstance(r, exception.QuotaExceeded)]
    assert len(created) == 1, results
    assert len(refused) == CONCURRENT - 1, results
    assert {str(r) for r in refused} == {
        'Quota exceeded for project %s: class:FPGA: limit %d, usage %d, '
        'requested 1' % (project_id, LIMIT, LIMIT)}
    usage = quotas_db.usage(cyborg_context.get_admin_context(), project_id)
    assert usage == {'accelerator_requests': LIMIT, 'class:FPGA': LIMIT}


def test_a_limit_changed_in_keystone_applies_after_the_cache_time(
        conf, limits, database):
    cache_time = 4
    conf.set_override('limit_cache_time', cache_time, group='quota')
    project_id = limits.keystone.add_project('quota-%s' % uuid.uuid4().hex[:8])
    limit_id = limits.set_project(project_id, 'class:FPGA', 5)
    conductor = manager.ConductorManager('c1', quotas=quotas.from_conf(conf))
    read_at = time.monotonic()
    assert isinstance(_create(conductor, project_id, 'fpga'), list)
    limits.change(limit_id, 1)
    # The limits were read after read_at and before the change.
    changed_at = time.monotonic()
    # Within the cache time the old limit (5) still holds.
    assert isinstance(_create(conductor, project_id, 'fpga'), list)
    assert time.monotonic() - read_at < cache_time, 'too slow to tell'
    time.sleep(max(0.0, changed_at + cache_time - time.monotonic()) + 0.1)
    refused = _create(conductor, project_id, 'fpga')
    assert isinstance(refused, exception.QuotaExceeded), refused
    assert 'class:FPGA: limit 1, usage 2, requested 1' in str(refused)


def test_limits_check_reads_the_registered_limits(conf, limits, database):
    admin = cyborg_context.get_admin_context()
    out = io.StringIO()
    assert manage.limits_check_command(admin, conf, out=out) == 0, (
        out.getvalue())
    name = 'unlimited-%s' % uuid.uuid4().hex[:8]
    profiles_db.device_profile_create(admin, {
        'name': name, 'groups': [{'resources:CUSTOM_QUOTA_TEST': '1'}]})
    out = io.StringIO()
    assert manage.limits_check_command(admin, conf, out=out) == 1
    assert out.getvalue().splitlines() == [
        'class:CUSTOM_QUOTA_TEST (device profiles %s): unlimited' % name]
    profiles_db.device_profile_delete(admin, [['name', name]])
