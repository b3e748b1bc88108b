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

"""The API reference's samples against the real API.

Every request sample under ``api-ref/source/samples`` is sent to the
all-in-one deployment, and every response is compared with its response
sample: the same keys at every level and the same JSON types (uuids,
timestamps and URLs may differ). The identifiers of the request samples
(an ARQ uuid, a resource provider, a host name, a deployable id) are
replaced with the deployment's real ones before a request is sent.

Each call is recorded against the reference's section of the endpoint it
reached (``tests/docs/api_ref.py``); the last test checks that every
section's endpoint was called, with each of its request samples sent to
it and each of its response samples compared with its answer.

``CYBORG_WRITE_API_SAMPLES=1`` writes the response samples from the real
responses instead (identifiers and URLs replaced with the samples' ones),
after a change of the API.
"""

from __future__ import annotations

import json
import os
import re
import uuid

import pytest
import requests

from tests.docs import api_ref

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
API_REF = os.path.join(ROOT, 'api-ref', 'source')
SAMPLES = os.path.join(API_REF, 'samples')
WRITE = os.environ.get('CYBORG_WRITE_API_SAMPLES') == '1'
MICROVERSION = 'accelerator 2.7'
# What the response samples show as the API's base URL.
SAMPLE_BASE_URL = 'https://cloud.example.com/accelerator'
SAMPLE_TIMESTAMP = '2026-01-15T09:30:00.000000+00:00'
TIMESTAMP = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00')
# The identifiers the samples use, by what they identify.
SAMPLE_IDS = {
    'profile_name': 'sample-fpga-profile',
    'profile_uuid': '2f2b4e9e-6b8a-4f2c-9d0e-5b1d6c7a8e01',
    'arq_uuid': '5a3d5d2e-5f1b-4a4d-9a38-3e0c2b2f4f11',
    'hostname': 'compute-1',
    'rp_uuid': '3c1e0a5b-2c0d-4a0b-8f7a-7a9b1d6e5c42',
    'instance_uuid': '9c8f7a61-4d2b-4c55-a3e1-0f6b2d7c8e93',
    'device_uuid': '7d6c5b4a-3e2f-4a1b-9c8d-0e1f2a3b4c5d',
    'deployable_uuid': '1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5e',
    'attribute_uuid': '6e5d4c3b-2a1f-4e0d-9c8b-7a6f5e4d3c2b',
    'attach_handle_uuid': '0f1e2d3c-4b5a-4968-8776-655443322110',
    'taint_rule_uuid': '3f2a9c7e-1b4d-4e6a-8c5f-2d7b9e1a4c60',
    'attribute_key': 'sample_key',
    'project_id': '6c1d8e3c5f0a4b2e9d7f1a3b5c7e9f01',
    # The attributes the agent's report created (rc, trait0).
    'listed_attribute_0': '4b8e1f2a-9c3d-4e5f-8a7b-6c5d4e3f2a10',
    'listed_attribute_1': '5c9f2a3b-0d4e-4f6a-9b8c-7d6e5f4a3b21',
}
ADMIN = {'x-roles': 'admin', 'openstack-api-version': MICROVERSION}
# Nova's requests: a service token besides the user's.
SERVICE_TOKEN = {'x-service-token': 'nova'}
# What the scenarios did, per reference section (method, path template):
# 'called', and the request samples sent and response samples compared.
USED: dict[tuple[str, str], dict[str, set[str]]] = {}
# Sections whose samples another module sends, to a deployment that can
# serve them: (method, path) -> (that module, its request and response
# samples). Programming needs an FPGA and a Glance.
CHECKED_ELSEWHERE = {
    ('PATCH', '/v2/deployables/{deployable_uuid}/program'): (
        'tests/functional/test_fpga_programming.py',
        {'requests': {'deployable-program-req.json'},
         'responses': {'deployable-program-resp.json'}}),
    # Text, not JSON: its families are checked against a two-worker API.
    ('GET', '/metrics'): (
        'tests/functional/test_prometheus.py',
        {'requests': set(), 'responses': {'metrics-get-resp.txt'}}),
}
# The scenarios (tests using the replay fixture) that started.
STARTED: set[str] = set()


def load(name: str):
    with open(os.path.join(SAMPLES, name)) as f:
        return json.load(f)


def substitute(value, mapping: dict[str, str]):
    """``value`` with every string (and dict key) found in ``mapping``
    replaced by what it maps to."""
    if isinstance(value, dict):
        return {mapping.get(k, k): substitute(v, mapping)
                for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, mapping) for v in value]
    if isinstance(value, str):
        return mapping.get(value, value)
    return value


def shape_mismatches(sample, actual, path: str = '$') -> list[str]:
    """Where ``actual`` differs from ``sample`` in keys or JSON types.

    Each element of a list is compared with the sample list's first
    element; an empty sample list wants an empty list. A null matches
    any string, number or boolean (fields that are null until set).
    """
    if isinstance(sample, dict):
        if not isinstance(actual, dict):
            return ['%s: an object in the sample, %r here' % (path, actual)]
        errors = []
        missing = sorted(set(sample) - set(actual))
        extra = sorted(set(actual) - set(sample))
        if missing:
            errors.append('%s: missing keys %s' % (path, missing))
        if extra:
            errors.append('%s: keys not in the sample %s' % (path, extra))
        for key in sample.keys() & actual.keys():
            errors += shape_mismatches(sample[key], actual[key],
                                       '%s.%s' % (path, key))
        return errors
    if isinstance(sample, list):
        if not isinstance(actual, list):
            return ['%s: a list in the sample, %r here' % (path, actual)]
        if not sample:
            return [] if not actual else ['%s: empty in the sample' % path]
        if not actual:
            return ['%s: empty here, not in the sample' % path]
        errors = []
        for index, item in enumerate(actual):
            errors += shape_mismatches(sample[0], item,
                                       '%s[%d]' % (path, index))
        return errors
    if sample is None or actual is None:
        scalar = (str, int, float, bool, type(None))
        if isinstance(sample, scalar) and isinstance(actual, scalar):
            return []
    if type(sample) is not type(actual):
        return ['%s: %s in the sample, %r here'
                % (path, type(sample).__name__, actual)]
    return []


class Replay:
    """Sends sample requests to one deployment and checks (or writes) the
    response samples.

    ``real`` maps each sample identifier to the deployment's one, as the
    scenario learns them. In write mode the responses wait in ``pending``
    until :meth:`write`, when every identifier is known.
    """

    def __init__(self, url: str):
        self.url = url
        self.real: dict[str, str] = {}
        self.pending: dict[str, object] = {}

    def _to_real(self) -> dict[str, str]:
        return {SAMPLE_IDS[k]: v for k, v in self.real.items()}

    def _to_sample(self, document):
        text = json.dumps(document)
        # Identifiers also appear inside links.
        for key, value in self.real.items():
            text = text.replace(value, SAMPLE_IDS[key])
        # One timestamp for all, so that writing again changes nothing
        # that did not change.
        text = TIMESTAMP.sub(SAMPLE_TIMESTAMP, text)
        # Links carry the URL the API was reached at.
        return json.loads(text.replace(self.url, SAMPLE_BASE_URL))

    def write(self) -> None:
        """Write the pending response samples."""
        for name, document in self.pending.items():
            with open(os.path.join(SAMPLES, name), 'w') as f:
                json.dump(self._to_sample(document), f, indent=4)
                f.write('\n')

    def call(self, method: str, path: str, status: int,
             request: str | None = None, response: str | None = None,
             headers: dict | None = None, body=None):
        """One request: ``request`` names its body's sample (its
        identifiers made real; ``body``, when given too, is that sample
        changed by the test), ``response`` the sample the answer must
        match (None: not compared). The decoded answer, or None for 202
        and 204, which must have no body."""
        if request is not None and body is None:
            body = substitute(load(request), self._to_real())
        section = api_ref.section_of(method, path)
        assert section is not None, (
            '%s %s: no section of the API reference' % (method, path))
        used = USED.setdefault((section.method, section.path),
                               {'requests': set(), 'responses': set()})
        if request is not None:
            used['requests'].add(request)
        result = requests.request(
            method, self.url + path, json=body, timeout=30,
            headers=headers if headers is not None else ADMIN)
        assert result.status_code == status, (
            '%s %s: %d %s' % (method, path, result.status_code, result.text))
        if status in (202, 204):
            assert not result.content, result.text
            return None
        document = result.json()
        if response is None:
            return document
        used['responses'].add(response)
        if WRITE:
            self.pending[response] = document
        else:
            errors = shape_mismatches(load(response), document)
            assert not errors, '%s %s against %s:\n%s' % (
                method, path, response, '\n'.join(errors))
        return document


@pytest.fixture
def replay(allinone, request):
    STARTED.add(request.node.name)
    replay = Replay(allinone.url)
    yield replay
    if WRITE:
        replay.write()


def _device(replay: Replay) -> dict:
    """The all-in-one's device and its first deployable, their ids
    recorded."""
    device = replay.call('GET', '/v2/devices', 200)['devices'][0]
    deployable = replay.call('GET', '/v2/deployables', 200)['deployables'][0]
    replay.real.update(device_uuid=device['uuid'],
                       deployable_uuid=deployable['uuid'],
                       rp_uuid=deployable['rp_uuid'],
                       hostname=device['hostname'])
    return device


def _create_profile(replay: Replay, name: str) -> None:
    """A profile like the sample's, under another name."""
    profile = load('device_profile-create-req.json')
    profile[0]['name'] = name
    replay.call('POST', '/v2/device_profiles', 201, body=profile)


def test_versions(replay):
    replay.call('GET', '/', 200, response='versions-list-resp.json',
                headers={})
    replay.call('GET', '/v2', 200, response='version-get-resp.json',
                headers={})


def test_errors(replay):
    replay.real['profile_uuid'] = str(uuid.uuid4())
    error = replay.call('GET', '/v2/device_profiles/'
                        + replay.real['profile_uuid'], 404,
                        response='error-resp.json')
    fault = json.loads(error['error_message'])
    assert sorted(fault) == ['debuginfo', 'faultcode', 'faultstring']
    assert fault['faultcode'] == 'Client'


def test_device_profiles(replay):
    created = replay.call('POST', '/v2/device_profiles', 201,
                          request='device_profile-create-req.json',
                          response='device_profile-create-resp.json')
    replay.real['profile_uuid'] = created['uuid']
    replay.real['profile_name'] = created['name']
    # Other tests' profiles have groups of other keys: the sample is
    # compared with the list of this one.
    listed = replay.call('GET', '/v2/device_profiles', 200)
    assert created['uuid'] in [p['uuid'] for p in listed['device_profiles']]
    replay.call('GET', '/v2/device_profiles?name=' + created['name'], 200,
                response='device_profiles-list-resp.json')
    replay.call('GET', '/v2/device_profiles/' + created['uuid'], 200,
                response='device_profile-get-resp.json')
    replay.call('GET', '/v2/device_profiles/' + created['name'], 200,
                response='device_profile-get-resp.json')
    updated = replay.call(
        'PATCH', '/v2/device_profiles/' + created['uuid'], 200,
        request='device_profile-update-req.json',
        response='device_profile-update-resp.json',
        headers=dict(ADMIN, **{'openstack-api-version': 'accelerator 2.9'}))
    assert updated['device_profile']['enabled'] is False
    # The three forms of delete, each on profiles of its own.
    names = ['samples-delete-%d-%s' % (i, uuid.uuid4().hex[:8])
             for i in range(3)]
    for name in names:
        _create_profile(replay, name)
    replay.call('DELETE', '/v2/device_profiles/' + names[0], 204)
    replay.call('DELETE', '/v2/device_profiles?value=' + ','.join(names[1:]),
                204)
    replay.call('DELETE', '/v2/device_profiles/' + created['uuid'], 204)
    remaining = replay.call('GET', '/v2/device_profiles?name='
                            + ','.join(names + [created['name']]), 200)
    assert remaining == {'device_profiles': []}


def test_accelerator_requests(replay):
    _device(replay)
    replay.real['profile_name'] = 'samples-arqs-' + uuid.uuid4().hex[:8]
    _create_profile(replay, replay.real['profile_name'])
    replay.real['instance_uuid'] = str(uuid.uuid4())
    # A project of its own: its user sees only this test's ARQs.
    replay.real['project_id'] = uuid.uuid4().hex
    user = {'x-roles': 'member', 'x-project-id': replay.real['project_id'],
            'openstack-api-version': MICROVERSION}
    nova = dict(user, **SERVICE_TOKEN)
    arqs = replay.call('POST', '/v2/accelerator_requests', 201,
                       request='arq-create-req.json', headers=user,
                       response='arqs-create-resp.json')['arqs']
    arq = arqs[0]['uuid']
    replay.real['arq_uuid'] = arq
    replay.call('GET', '/v2/accelerator_requests', 200, headers=user,
                response='arqs-list-resp.json')
    replay.call('GET', '/v2/accelerator_requests/' + arq, 200, headers=user,
                response='arq-get-resp.json')
    replay.call('PATCH', '/v2/accelerator_requests', 202,
                request='arqs-bind-req.json', headers=nova)
    bound = replay.call(
        'GET', '/v2/accelerator_requests?instance=%s&bind_state=resolved'
        % replay.real['instance_uuid'], 200, headers=user,
        response='arqs-list-bound-resp.json')
    assert [a['state'] for a in bound['arqs']] == ['Bound']
    replay.real['attach_handle_uuid'] = bound['arqs'][0]['attach_handle_uuid']
    replay.call('PATCH', '/v2/accelerator_requests/' + arq, 202,
                request='arq-unbind-req.json', headers=nova)
    replay.call('DELETE', '/v2/accelerator_requests?arqs=' + arq, 204,
                headers=user)
    # The other two forms of delete.
    again = replay.call('POST', '/v2/accelerator_requests', 201,
                        request='arq-create-req.json',
                        headers=user)['arqs'][0]['uuid']
    replay.call('DELETE', '/v2/accelerator_requests/' + again, 204,
                headers=user)
    replay.call('DELETE', '/v2/accelerator_requests?instance='
                + replay.real['instance_uuid'], 204, headers=nova)
    assert replay.call('GET', '/v2/accelerator_requests', 200,
                       headers=user) == {'arqs': []}
    replay.call('DELETE', '/v2/device_profiles/'
                + replay.real['profile_name'], 204)


def _hold_device(replay: Replay) -> dict:
    """An ARQ of a project of its own bound to the device (recorded by
    :func:`_device`), so that its samples show who holds it; the user's
    headers."""
    replay.real['profile_name'] = 'samples-devices-' + uuid.uuid4().hex[:8]
    _create_profile(replay, replay.real['profile_name'])
    replay.real['instance_uuid'] = str(uuid.uuid4())
    replay.real['project_id'] = uuid.uuid4().hex
    user = {'x-roles': 'member', 'x-project-id': replay.real['project_id'],
            'openstack-api-version': MICROVERSION}
    body = substitute(load('arq-create-req.json'), replay._to_real())
    replay.real['arq_uuid'] = replay.call(
        'POST', '/v2/accelerator_requests', 201, body=body,
        headers=user)['arqs'][0]['uuid']
    replay.call('PATCH', '/v2/accelerator_requests', 202,
                body=substitute(load('arqs-bind-req.json'),
                                replay._to_real()),
                headers=dict(user, **SERVICE_TOKEN))
    bound = replay.call(
        'GET', '/v2/accelerator_requests?instance=%s&bind_state=resolved'
        % replay.real['instance_uuid'], 200, headers=user)
    assert [a['state'] for a in bound['arqs']] == ['Bound']
    return user


def test_devices(replay):
    _device(replay)
    user = _hold_device(replay)
    try:
        listed = replay.call('GET', '/v2/devices', 200,
                             response='devices-list-resp.json')
        # The device of the deployable the ARQ is bound to.
        [device] = [d for d in listed['devices'] if any(
            deployable['uuid'] == replay.real['deployable_uuid']
            for deployable in d['deployables'])]
        replay.real['device_uuid'] = device['uuid']
        path = '/v2/devices/' + device['uuid']
        shown = replay.call('GET', path, 200, response='device-get-resp.json')
    finally:
        replay.call('DELETE', '/v2/accelerator_requests?instance='
                    + replay.real['instance_uuid'], 204,
                    headers=dict(user, **SERVICE_TOKEN))
        replay.call('DELETE', '/v2/device_profiles/'
                    + replay.real['profile_name'], 204)
    # Admins see who holds the device (microversion 2.7).
    [held] = [deployable['allocations'] for deployable
              in shown['deployables'] if deployable['allocations']]
    assert held == [{'arq_uuid': replay.real['arq_uuid'], 'state': 'Bound',
                     'instance_uuid': replay.real['instance_uuid'],
                     'project_id': replay.real['project_id']}]
    assert shown == device
    replay.call('POST', path + '/disable', 204)
    try:
        assert replay.call('GET', path, 200)['status'] == 'maintaining'
    finally:
        replay.call('POST', path + '/enable', 204)
    assert replay.call('GET', path, 200)['status'] == 'enabled'
    # The fake driver partitions no device: its partition profile (2.10)
    # is refused. The accepted call is tests/functional/
    # test_device_partitions.py's, on a MIG GPU.
    replay.call('PUT', path + '/partitions', 409,
                request='device-partitions-req.json',
                headers=dict(ADMIN, **{
                    'openstack-api-version': 'accelerator 2.10'}))


def test_deployables(replay):
    _device(replay)
    replay.call('GET', '/v2/deployables', 200,
                response='deployables-list-resp.json')
    replay.call('GET', '/v2/deployables/' + replay.real['deployable_uuid'],
                200, response='deployable-get-resp.json')


def test_attributes(replay):
    existing = replay.call('GET', '/v2/attributes', 200,
                           response='attributes-list-resp.json')
    for index, attribute in enumerate(existing['attributes'][:2]):
        replay.real['listed_attribute_%d' % index] = attribute['uuid']
    body = load('attribute-create-req.json')
    body['deployable_id'] = existing['attributes'][0]['deployable_id']
    body['key'] = 'samples_' + uuid.uuid4().hex[:8]
    created = replay.call('POST', '/v2/attributes', 201, body=body,
                          request='attribute-create-req.json',
                          response='attribute-create-resp.json')
    replay.real['attribute_uuid'] = created['uuid']
    replay.real['attribute_key'] = created['key']
    replay.call('GET', '/v2/attributes/' + created['uuid'], 200,
                response='attribute-get-resp.json')
    replay.call('DELETE', '/v2/attributes/' + created['uuid'], 204)


def test_device_taint_rules(replay):
    _device(replay)
    headers = dict(ADMIN, **{'openstack-api-version': 'accelerator 2.8'})
    created = replay.call('POST', '/v2/device_taint_rules', 201,
                          request='device_taint_rule-create-req.json',
                          response='device_taint_rule-create-resp.json',
                          headers=headers)
    replay.real['taint_rule_uuid'] = created['uuid']
    # A dry run over the host's devices: it lists them, changes nothing.
    assert [d['uuid'] for d in created['status']['devices']] == [
        replay.real['device_uuid']]
    path = '/v2/device_taint_rules/' + created['uuid']
    replay.call('GET', '/v2/device_taint_rules', 200,
                response='device_taint_rules-list-resp.json',
                headers=headers)
    replay.call('GET', path, 200, response='device_taint_rule-get-resp.json',
                headers=headers)
    replay.call('DELETE', path, 204, headers=headers)


def test_quotas(replay):
    _device(replay)
    name = 'samples-quotas-' + uuid.uuid4().hex[:8]
    _create_profile(replay, name)
    replay.real['project_id'] = uuid.uuid4().hex
    user = {'x-roles': 'member,reader',
            'x-project-id': replay.real['project_id'],
            'openstack-api-version': 'accelerator 2.9'}
    replay.call('POST', '/v2/accelerator_requests', 201, headers=user,
                body={'device_profile_name': name})
    quota = replay.call('GET', '/v2/quotas/' + replay.real['project_id'],
                        200, headers=user, response='quota-get-resp.json')
    # The all-in-one's [quota] driver is noop: no limits, usage counted.
    assert quota['quota']['resources']['class:FPGA'] == {'limit': -1,
                                                         'usage': 1}


def test_every_sample_is_documented_and_replayed():
    """Each sample file is shown by the API reference and sent or
    checked here, and everything the reference shows exists."""
    files = {f for f in os.listdir(SAMPLES) if f.endswith('.json')}
    # The text sample of /metrics is checked elsewhere (CHECKED_ELSEWHERE).
    files.add('metrics-get-resp.txt')
    shown = set()
    for name in os.listdir(API_REF):
        if name.endswith('.inc'):
            with open(os.path.join(API_REF, name)) as f:
                shown.update(re.findall(r'literalinclude:: samples/(\S+)',
                                        f.read()))
    with open(__file__) as f:
        replayed = set(re.findall(r"'([\w-]+-(?:req|resp)\.json)'", f.read()))
    assert shown == files, (sorted(files - shown), sorted(shown - files))
    replayed.add('metrics-get-resp.txt')
    assert replayed == files, (sorted(files - replayed),
                               sorted(replayed - files))


def test_every_endpoint_was_sent_its_samples():
    """Each section of the reference: its endpoint was called, its
    request samples were sent to it and its response samples compared
    with its answers (after the scenarios above, in this module's
    order)."""
    scenarios = {name for name, value in globals().items()
                 if name.startswith('test_') and callable(value)
                 and 'replay' in value.__code__.co_varnames[
                     :value.__code__.co_argcount]}
    if not scenarios <= STARTED:
        pytest.skip('needs every scenario of the module; not run: %s'
                    % sorted(scenarios - STARTED))
    errors = []
    for section in api_ref.sections():
        used = USED.get((section.method, section.path))
        if (section.method, section.path) in CHECKED_ELSEWHERE:
            module, used = CHECKED_ELSEWHERE[section.method, section.path]
            with open(os.path.join(ROOT, module)) as f:
                text = f.read()
            used = {kind: {name for name in names if name in text}
                    for kind, names in used.items()}
        if used is None:
            errors.append('%s %s: never called' % (section.method,
                                                   section.path))
            continue
        for kind, samples in (('requests', section.requests),
                              ('responses', section.responses)):
            for sample in sorted(set(samples) - used[kind]):
                errors.append('%s %s: %s not used' % (
                    section.method, section.path, sample))
    assert not errors, '\n'.join(errors)
