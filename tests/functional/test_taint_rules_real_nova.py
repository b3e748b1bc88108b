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

"""Device taint rules with real Nova services (nova_services.py): a
server runs with an accelerator; a dry-run rule over its device tells
what it would affect and changes nothing; a NoExecute rule marks the
server's ARQ and its ``device_taint_rule.no_execute`` notification,
heard by a real oslo.messaging listener, names the server and its
project. Nothing is stopped: the server stays ACTIVE. Deleting the rule
removes its taints and the mark.
"""

from __future__ import annotations

import threading
import time
import uuid

import jsonschema
from oslo_config import cfg
import oslo_messaging as messaging
import pytest

from cyborg.notifications import payloads
from tests.functional import nova_services
from tests.functional import servers
from tests.functional import test_real_nova as real_nova

HOST = 'taint-nova-1'
TRAIT = 'CUSTOM_TAINT_RULES_PCI'
V2_8 = 'accelerator 2.8'
EVENT = 'device_taint_rule.no_execute'
COMPUTES = [nova_services.ComputeSpec(HOST, [
    real_nova._device('0000:81:00.0', TRAIT),
    real_nova._device('0000:82:00.0', TRAIT)])]


class Listener:
    """A notification listener's endpoint: what it heard."""

    def __init__(self):
        self.received: list[dict] = []
        self._lock = threading.Lock()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        with self._lock:
            self.received.append({'event_type': event_type,
                                  'publisher_id': publisher_id,
                                  'payload': payload})

    def of(self, event_type: str) -> list[dict]:
        with self._lock:
            return [n for n in self.received
                    if n['event_type'] == event_type]


@pytest.fixture(scope='module')
def vhost(rabbitmq):
    return rabbitmq.create_vhost('taint-rules-%s' % uuid.uuid4().hex[:8])


@pytest.fixture(scope='module')
def rn(postgres, rabbitmq, placement_pg, keystone, work_dir, vhost):
    with nova_services.real_nova(
            'taint-nova', postgres, rabbitmq, placement_pg, keystone,
            work_dir, COMPUTES, cyborg_options={
                'notifications': {'driver': 'messagingv2',
                                  'transport_url': vhost}}) as d:
        d.profiles = {}
        d.flavors = {}
        yield d
        d.check_alive()


@pytest.fixture(scope='module')
def listener(rn, vhost):
    conf = cfg.ConfigOpts()
    conf([], project='cyborg-taint-rules-test')
    transport = messaging.get_notification_transport(conf, url=vhost)
    endpoint = Listener()
    server = messaging.get_notification_listener(
        transport, [messaging.Target(topic='versioned_notifications')],
        [endpoint], executor='threading')
    server.start()
    try:
        yield endpoint
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


@pytest.fixture(scope='module')
def running(rn):
    """A server with one accelerator, ACTIVE: (server, its ARQ, the
    device's uuid and address)."""
    server = real_nova._boot(rn, [], TRAIT)
    real_nova._wait_status(rn, server, 'ACTIVE')
    [arq] = real_nova._assert_bound(rn, server, HOST).values()
    [(device, address)] = rn.db_rows(
        'SELECT d.uuid, d.address FROM devices d JOIN deployables dep ON '
        'dep.device_id = d.id WHERE dep.rp_uuid = :rp',
        rp=arq['device_rp_uuid'])
    yield server, arq, str(device), address
    rn.compute_response('DELETE', '/servers/%s' % server)
    real_nova._wait_gone(rn, server)


def _state(rn) -> dict:
    """What a rule may change: taint rows, ARQ marks, sync requests."""
    return {
        'taints': rn.db_rows('SELECT device_id, key, effect, origin FROM '
                             'device_taints ORDER BY id'),
        'marks': rn.db_rows('SELECT uuid, taint_marked_at, taint_marked_by '
                            'FROM extended_accelerator_requests ORDER BY '
                            'uuid'),
        'syncs': rn.db_rows('SELECT host, sync_requested FROM services '
                            'WHERE host = :host', host=HOST),
    }


def _rule(rn, effect: str, address: str, key: str) -> dict:
    return rn.cyborg('POST', '/device_taint_rules', version=V2_8, json={
        'name': 'drain-%s' % key, 'selector': {'host': HOST,
                                               'address': address},
        'taint': {'key': key, 'effect': effect,
                  'reason': 'fan failure'}})


def _status_names(status: dict, server: str, arq: dict, device: str,
                  address: str) -> None:
    assert status['devices'] == [{'uuid': device, 'hostname': HOST,
                                  'address': address}]
    assert status['arqs'] == [arq['uuid']]
    assert status['instances'] == [server]
    assert status['projects'] == [arq['project_id']]


def test_a_dry_run_changes_nothing(rn, listener, running):
    server, arq, device, address = running
    before = _state(rn)
    rule = _rule(rn, 'None', address, 'example.dry-run')
    _status_names(rule['status'], server, arq, device, address)
    shown = rn.cyborg('GET', '/device_taint_rules/' + rule['uuid'],
                      version=V2_8)['device_taint_rule']
    _status_names(shown['status'], server, arq, device, address)
    time.sleep(1)  # a notification or a sync would follow at once
    assert _state(rn) == before
    assert listener.of(EVENT) == []
    rn.cyborg('DELETE', '/device_taint_rules/' + rule['uuid'],
              version=V2_8)
    assert _state(rn) == before
    assert real_nova._server(rn, server)['status'] == 'ACTIVE'


def test_no_execute_marks_the_servers_arq_and_names_it(rn, listener,
                                                       running):
    server, arq, device, address = running
    before = _state(rn)
    rule = _rule(rn, 'NoExecute', address, 'example.drain')
    _status_names(rule['status'], server, arq, device, address)
    [(marked_at, marked_by)] = rn.db_rows(
        'SELECT taint_marked_at, taint_marked_by FROM '
        'extended_accelerator_requests WHERE uuid = :arq', arq=arq['uuid'])
    assert marked_at is not None and marked_by == 'example.drain'
    assert [(str(origin), effect) for origin, effect in rn.db_rows(
        'SELECT origin, effect FROM device_taints')] == [
        (rule['uuid'], 'NoExecute')]
    assert _state(rn)['syncs'][0][1] > before['syncs'][0][1]
    servers.wait_for(lambda: listener.of(EVENT), 30,
                     'the %s notification' % EVENT)
    [notification] = listener.of(EVENT)
    event = payloads.EVENTS[EVENT]
    jsonschema.Draft202012Validator(
        event.payload.schema(),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(notification['payload'])
    assert notification['publisher_id'].startswith('cyborg-conductor:')
    data = notification['payload']['cyborg_object.data']
    assert (data['uuid'], data['effect']) == (rule['uuid'], 'NoExecute')
    assert data['instances'] == [server]
    assert data['projects'] == [arq['project_id']]
    assert [(a['uuid'], a['instance_uuid'], a['device_uuid'])
            for a in data['arqs']] == [(arq['uuid'], server, device)]
    # Nothing is stopped: the operator moves the server.
    assert real_nova._server(rn, server)['status'] == 'ACTIVE'
    rn.cyborg('DELETE', '/device_taint_rules/' + rule['uuid'],
              version=V2_8)
    after = _state(rn)
    assert after['taints'] == []
    assert [m for m in after['marks'] if str(m[0]) == arq['uuid']] == [
        (arq['uuid'], None, None)]
