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

"""Taints and tolerations against the real Placement (property-based).

For random driver and admin taints on the devices of a host, and a
random device profile group with random tolerations: the report and the
admin rows are stored, the host is synced to the real Placement
(:mod:`cyborg.conductor.placement_sync`), the profile is read through the
API as Nova reads it (``GET /v2/device_profiles?name=``), and Placement's
allocation candidates for that group, asked as Nova asks them, are
exactly the devices whose every scheduling taint (NoSchedule, NoExecute)
the group tolerates: none on an untolerated device, every tolerated one
present.
"""

import datetime
from unittest import mock
from urllib import parse
import uuid

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from oslo_config import cfg
import pytest
import sqlalchemy as sa
import webob

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.accelerator.drivers.fake import opts as fake_driver_conf
from cyborg.allinone import embedded_placement
from cyborg.api import app as api_app
from cyborg.common import rpc
from cyborg.conductor import placement_sync
from cyborg.conf import CONF
from cyborg.conf import opts as conf_opts
from cyborg.db import api as db_api
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import migration
from cyborg.db import models
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import device_tree
from cyborg.domain import providers
from cyborg.domain import taints as taint_rules
from cyborg.domain import tolerations as tol_rules

pytestmark = pytest.mark.timeout(300)

DEVICES = 4
KEYS = ('gpu.xid', 'gpu.aer', 'drain')
VALUES = ('', 'a', 'b')
#: When admin rows were added: long before any sync of the test (as
#: if the rule had been applied and synced already; a sync rewrites the
#: providers whose traits change).
LONG_AGO = datetime.datetime(2020, 1, 1)


class _DatabaseConf:
    def __init__(self, url):
        self.database = {'connection': url}


@pytest.fixture(scope='module')
def engine(tmp_path_factory):
    url = 'sqlite:///%s' % (tmp_path_factory.mktemp('taints') / 'db.sqlite')
    engine = sa.create_engine(url)
    try:
        migration.upgrade(engine=engine)
        db_api.configure(_DatabaseConf(url))
        yield engine
    finally:
        db_api.get_engine().dispose()
        engine.dispose()


@pytest.fixture(scope='module')
def host(engine, placement):
    """(host name, the fake devices' wire form, Placement client)."""
    name = 'taints-%s' % uuid.uuid4().hex[:8]
    resource_class = 'CUSTOM_TAINTPROP_%s' % uuid.uuid4().hex[:8].upper()
    client = placement.client()
    compute = embedded_placement.ensure_compute_node(client, name)
    conf = cfg.ConfigOpts()
    fake_driver_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    overrides = {'num_devices': DEVICES, 'accelerators_per_device': 1,
                 'resource_class': resource_class}
    for option, value in overrides.items():
        conf.set_override(option, value, group='fake_driver')
    try:
        wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    finally:
        # The group object, and its overrides, is shared.
        for option in overrides:
            conf.clear_override(option, group='fake_driver')
    try:
        # One sync for every example: it creates each trait once.
        yield (name, resource_class, wire, client,
               placement_sync.PlacementSync(client))
    finally:
        for provider in client.provider_tree(compute):
            if provider['uuid'] != compute:
                client.delete_provider(provider['uuid'])
        client.delete_provider(compute)


@pytest.fixture(scope='module')
def api():
    conf_opts.set_lib_defaults()
    rpc.register_opts(CONF)
    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('auth_strategy', 'noauth', group='api')
    # Every read sees the taints of its example.
    CONF.set_override('device_profile_cache_ttl', 0, group='api')
    try:
        with mock.patch('cyborg.conductor.rpcapi.ConductorAPI'):
            yield api_app.setup_app(CONF, transport=object())
    finally:
        CONF.reset()


def _taint():
    return st.builds(taint_rules.Taint, key=st.sampled_from(KEYS),
                     value=st.sampled_from(VALUES),
                     effect=st.sampled_from(taint_rules.EFFECTS))


def _by_key(taints):
    return st.lists(taints, max_size=len(KEYS),
                    unique_by=lambda taint: taint.key)


_TOLERATION = st.one_of(
    st.just(tol_rules.EXISTS),
    st.sampled_from(VALUES).map(lambda value: tol_rules.EQUAL + ':' + value))

CASE = st.fixed_dictionaries({
    # Per device: its driver taints and its admin taints.
    'driver': st.lists(_by_key(_taint()), min_size=DEVICES,
                       max_size=DEVICES),
    'admin': st.lists(_by_key(_taint()), min_size=DEVICES,
                      max_size=DEVICES),
    'tolerations': st.dictionaries(st.sampled_from(KEYS), _TOLERATION),
})


def _store(context, engine, host, wire, driver, admin):
    """The report with ``driver``'s taints, and ``admin``'s rows."""
    wire = [dict(device) for device in wire]
    for device, taints in zip(wire, driver, strict=True):
        device['taints'] = [taint.to_wire() for taint in taints]
        # As an agent reports it (see cyborg.domain.taints).
        device['health'] = ('unhealthy' if any(
            taint.keeps_allocations_off() for taint in taints)
            else 'healthy')
        if not device['taints']:
            del device['taints']
    inventory.apply_report(context, host, host, wire,
                           device_tree.tree_digest(wire), [])
    with engine.begin() as connection:
        ids = dict(connection.execute(sa.select(
            models.DEVICES.c.address, models.DEVICES.c.id).where(
            models.DEVICES.c.hostname == host)).all())
        connection.execute(sa.delete(models.TAINTS).where(
            models.TAINTS.c.source == 'admin'))
        rows = [dict(device_id=ids[device['address']], key=taint.key,
                     value=taint.value, effect=taint.effect.value,
                     source='admin', origin=str(uuid.uuid5(
                         uuid.NAMESPACE_URL, taint.key)),
                     created_at=LONG_AGO)
                for device, taints in zip(wire, admin, strict=True)
                for taint in taints]
        if rows:
            connection.execute(sa.insert(models.TAINTS), rows)


def _candidates(client, groups) -> set[str]:
    """The providers Placement offers for the (one) group, as Nova asks
    (granular request, forbidden traits with "!")."""
    [group] = groups
    resources, required = [], []
    for key, value in group.items():
        kind, _sep, name = key.partition(':')
        if kind == 'resources':
            resources.append('%s:%s' % (name, value))
        elif kind == 'trait':
            required.append(('!' if value == 'forbidden' else '') + name)
    params = [('resources1', ','.join(resources))]
    if required:
        params.append(('required1', ','.join(sorted(required))))
    response = client.adapter.get(
        '/allocation_candidates?' + parse.urlencode(params),
        microversion='1.26', raise_exc=False)
    assert response.status_code == 200, response.text
    return {uuid_ for request in response.json()['allocation_requests']
            for uuid_ in request['allocations']}


def _tolerated(taints, tolerations) -> bool:
    """Whether every scheduling taint of a device is tolerated, as each
    toleration says (KEP-5055's Exists and Equal)."""
    parsed = {key: tol_rules.parse_value(key, text)
              for key, text in tolerations.items()}
    return all(taint.key in parsed
               and parsed[taint.key].tolerates(taint.key, taint.value)
               for taint in taints if taint.keeps_allocations_off())


def _profile_groups(api, name) -> list[dict]:
    request = webob.Request.blank('/v2/device_profiles?name=' + name,
                                  headers={'x-roles': 'admin'})
    response = request.get_response(api)
    assert response.status_int == 200, response.text
    return response.json['device_profiles'][0]['groups']


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(case=CASE)
def test_candidates_are_exactly_the_tolerated_devices(engine, host, api,
                                                      case):
    name, resource_class, wire, client, sync = host
    context = cyborg_context.get_admin_context()
    _store(context, engine, name, wire, case['driver'], case['admin'])
    assert sync.sync_host(context, name)
    group = {'resources:%s' % resource_class: '1'}
    group.update({'toleration:' + key: text
                  for key, text in case['tolerations'].items()})
    profile = 'tp-%s' % uuid.uuid4().hex[:8]
    profiles_db.device_profile_create(context, {
        'name': profile, 'groups': dp_rules.normalize_groups([group])})
    chosen = _candidates(client, _profile_groups(api, profile))
    rp_of = {device['address']: providers.provider_uuid(
        name, device['address'], device['deployables'][0]['name'])
        for device in wire}
    expected = {rp_of[device['address']]
                for device, driver, admin in zip(
                    wire, case['driver'], case['admin'], strict=True)
                if _tolerated(driver + admin, case['tolerations'])}
    assert chosen == expected
