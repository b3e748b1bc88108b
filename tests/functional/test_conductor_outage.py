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

"""Every conductor gone: writes answer 503 soon, and change nothing.

The deployment is nova_flow.py's (two conductors sharing the RPC topic
over RabbitMQ, the API in noauth, one agent with PCI handles), on
PostgreSQL and then on MariaDB (``db_server``), with the API restarted
with ``[api] conductor_timeout`` = :data:`CONDUCTOR_TIMEOUT`. Both
conductors are killed (SIGKILL); each write (device profile, ARQ
creation, bind, unbind, delete by uuid and by instance) answers 503 with
``Retry-After`` within the timeout plus :data:`SLACK`, reads keep
working, and the database is unchanged, also once the conductors are
back (oslo.messaging's call messages expire with the call's timeout, so
a restarted conductor does not run what the API already answered).
After the restart, the same writes succeed.
"""

from concurrent import futures
import configparser
import json
import os
import time
import uuid

import pytest

from tests.functional import nova_flow
from tests.functional import servers

HOST = 'outage-host'
CONDUCTOR_TIMEOUT = 4
# What a 503 may take beyond the timeout (RabbitMQ, the API's reply).
SLACK = 4
INSTANCE = str(uuid.uuid4())


def _restart_api(flow, **api_options):
    """Restart the API with more ``[api]`` options."""
    config_file = os.path.join(flow.directory, 'api.conf')
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(config_file)
    sections = {'DEFAULT': dict(parser.defaults())}
    sections.update({name: {key: value for key, value in parser.items(name)
                            if key not in parser.defaults()}
                     for name in parser.sections()})
    sections['api'].update(api_options)
    servers.write_config(config_file, sections)
    flow.api.stop()
    flow.api = servers.CyborgProcess('cyborg-api', None, flow.directory,
                                     args=['--config-file', config_file],
                                     name='cyborg-api-bounded').start()
    flow.api.wait_http(flow.url + '/', nova_flow.START_TIMEOUT)


@pytest.fixture(scope='module')
def flow(db_server, rabbitmq, placement, work_dir):
    agents = [nova_flow.AgentSpec(HOST, devices=1, handles=4)]
    with nova_flow.deployment(
            'outage-' + nova_flow.database_kind(db_server), db_server,
            rabbitmq, placement, work_dir, agents, conductor_workers=4
    ) as deployment:
        _restart_api(deployment, conductor_timeout=CONDUCTOR_TIMEOUT)
        yield deployment


def _snapshot(flow):
    """What the writes could change, as the database says."""
    return {
        'arqs': [tuple(row) for row in flow.db_rows(
            'SELECT uuid, state, instance_uuid, attach_handle_id, '
            'device_rp_uuid FROM extended_accelerator_requests '
            'ORDER BY uuid')],
        'profiles': [row[0] for row in flow.db_rows(
            'SELECT name FROM device_profiles ORDER BY name')],
        'handles_in_use': flow.db_rows(
            'SELECT count(*) FROM attach_handles WHERE in_use')[0][0],
        'events': flow.db_rows('SELECT count(*) FROM nova_events')[0][0],
    }


def _binding(flow, instance=INSTANCE):
    return {'hostname': HOST, 'device_rp_uuid': flow.devices[HOST][0].rp_uuid,
            'instance_uuid': instance}


def _timed(call):
    start = time.monotonic()
    response = call()
    return response, time.monotonic() - start


def test_writes_answer_503_while_every_conductor_is_down(flow):
    flow.delete_all_arqs()
    profile = flow.create_profile([{'resources:FPGA': '1',
                                    'trait:' + flow.trait: 'required'}])
    to_bind, = flow.create_arqs(profile)
    bound, = flow.create_arqs(profile)
    response = flow.bind({bound['uuid']: _binding(flow)})
    assert response.status_code == 202, response.text
    flow.wait_resolved([bound['uuid']], timeout=30)
    unbound, = flow.create_arqs(profile)
    before = _snapshot(flow)

    for index in range(len(flow.conductors)):
        flow.kill_conductor(index)
    try:
        writes = {
            'create profile': lambda: flow.request(
                'POST', '/v2/device_profiles',
                json=[{'name': 'outage-new', 'groups': [
                    {'resources:FPGA': '1'}]}]),
            'create ARQs': lambda: flow.request(
                'POST', '/v2/accelerator_requests',
                json={'device_profile_name': profile}),
            'bind': lambda: flow.bind(
                {to_bind['uuid']: _binding(flow, str(uuid.uuid4()))}),
            'unbind': lambda: flow.request(
                'PATCH', '/v2/accelerator_requests', service=True,
                json={bound['uuid']: [{'op': 'remove',
                                       'path': '/hostname'},
                                      {'op': 'remove',
                                       'path': '/device_rp_uuid'},
                                      {'op': 'remove',
                                       'path': '/instance_uuid'}]}),
            'delete by uuid': lambda: flow.request(
                'DELETE', '/v2/accelerator_requests', service=True,
                params={'arqs': unbound['uuid']}),
            'delete by instance': lambda: flow.request(
                'DELETE', '/v2/accelerator_requests', service=True,
                params={'instance': INSTANCE}),
            'delete profile': lambda: flow.request(
                'DELETE', '/v2/device_profiles/' + profile),
        }
        with futures.ThreadPoolExecutor(len(writes)) as pool:
            answers = dict(zip(writes, pool.map(_timed, writes.values()),
                               strict=True))
        for what, (response, elapsed) in answers.items():
            assert response.status_code == 503, (what, response.text)
            assert response.headers.get('Retry-After'), what
            fault = json.loads(response.json()['error_message'])
            assert fault['faultstring'] == (
                'No conductor answered within %d s; retry later.'
                % CONDUCTOR_TIMEOUT), what
            assert elapsed < CONDUCTOR_TIMEOUT + SLACK, (what, elapsed)
            assert elapsed >= CONDUCTOR_TIMEOUT - 0.5, (what, elapsed)
        # Reads do not need a conductor.
        assert {a['uuid'] for a in flow.arqs()} == {
            to_bind['uuid'], bound['uuid'], unbound['uuid']}
        assert _snapshot(flow) == before
        assert 'Traceback' not in flow.api.log_text()
    finally:
        for index in range(len(flow.conductors)):
            flow.start_conductor(index)

    # The calls the API answered expired in RabbitMQ: the conductors,
    # back, do not run them.
    time.sleep(2)
    assert _snapshot(flow) == before

    response = flow.bind({to_bind['uuid']: _binding(flow)})
    assert response.status_code == 202, response.text
    assert flow.wait_resolved([to_bind['uuid']], timeout=30)[
        to_bind['uuid']]['state'] == 'Bound'
    created = flow.create_arqs(profile)
    response = flow.request('DELETE', '/v2/accelerator_requests',
                            service=True,
                            params={'arqs': ','.join(
                                [unbound['uuid'], created[0]['uuid']])})
    assert response.status_code == 204, response.text
    response = flow.request('DELETE', '/v2/accelerator_requests',
                            service=True, params={'instance': INSTANCE})
    assert response.status_code == 204, response.text
    assert flow.arqs() == []
    assert flow.handle_stats()['in_use'] == 0
    flow.check_alive()
