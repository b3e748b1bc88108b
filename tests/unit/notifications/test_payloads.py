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

"""The payloads' schemas, and doc/notification_samples/ against them."""

import json
import os

import jsonschema
import pytest

from cyborg.conductor import notifications
from cyborg.notifications import notifier as notifier_mod
from cyborg.notifications import payloads

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SAMPLES = os.path.join(ROOT, 'doc', 'notification_samples')


def validator(event_type: str) -> jsonschema.Draft202012Validator:
    """The validator of ``event_type``'s payload (uuid formats checked)."""
    return jsonschema.Draft202012Validator(
        payloads.EVENTS[event_type].payload.schema(),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def sample(event_type: str) -> dict:
    with open(os.path.join(SAMPLES, event_type + '.json')) as f:
        return json.load(f)


def sample_types() -> set[str]:
    return {name[:-len('.json')] for name in os.listdir(SAMPLES)
            if name.endswith('.json')}


class Recording:
    """oslo.messaging's Notifier, as Notifier uses it: what was sent."""

    def __init__(self):
        self.sent: list[tuple[str, str, dict]] = []

    def info(self, context, event_type, payload):
        self.sent.append(('INFO', event_type, payload))

    def error(self, context, event_type, payload):
        self.sent.append(('ERROR', event_type, payload))


@pytest.mark.parametrize('payload', [payloads.ARQ, payloads.DEVICE,
                                     payloads.DEPLOYABLE])
def test_every_schema_is_a_valid_json_schema(payload):
    jsonschema.Draft202012Validator.check_schema(payload.schema())


def test_every_event_type_has_a_sample_and_every_sample_an_event_type():
    assert sample_types() == set(payloads.EVENTS)


def test_the_conductor_names_exactly_the_event_types_listed():
    names = {value for name, value in vars(notifications).items()
             if name.isupper() and isinstance(value, str)}
    assert names == set(payloads.EVENTS)


@pytest.mark.parametrize('event_type', sorted(payloads.EVENTS))
def test_each_sample_is_valid_against_its_payload_schema(event_type):
    document = sample(event_type)
    event = payloads.EVENTS[event_type]
    assert document['event_type'] == event_type
    assert document['priority'] == event.priority.upper()
    assert document['publisher_id'].startswith('cyborg-conductor:')
    validator(event_type).validate(document['payload'])


def test_a_payload_missing_a_field_or_with_another_is_invalid():
    document = sample('device.create')['payload']
    data = document['cyborg_object.data']
    missing = dict(document, **{'cyborg_object.data': {
        k: v for k, v in data.items() if k != 'health'}})
    extra = dict(document, **{'cyborg_object.data': dict(data, x=1)})
    wrong = dict(document, **{'cyborg_object.version': '2.0'})
    for payload in (missing, extra, wrong):
        assert list(validator('device.create').iter_errors(payload))


def test_arq_values_show_the_attach_handle_only_while_bound():
    arq = {'uuid': 'u', 'state': 'BindStarted', 'device_profile_name': 'p',
           'device_profile_group_id': 0, 'project_id': 'p1',
           'instance_uuid': 'i', 'hostname': 'h', 'device_rp_uuid': 'r',
           'attach_handle_uuid': 'h1', 'attach_handle_type': 'PCI',
           'attach_handle_info': {'bus': '5e'}, 'bind_error': None,
           'bind_owner': 'c1'}
    started = payloads.arq_values(arq)
    assert (started['attach_handle_uuid'], started['attach_handle_type'],
            started['attach_handle_info']) == (None, None, None)
    bound = payloads.arq_values(dict(arq, state='Bound'))
    assert bound['attach_handle_info'] == {'bus': '5e'}
    assert 'bind_owner' not in bound


def test_device_values_of_an_inserted_row_default_to_enabled():
    values = payloads.device_values({
        'uuid': 'u', 'hostname': 'h', 'address': 'a', 'type': 'GPU',
        'vendor': 'v', 'model': 'm', 'driver': None, 'health': 'healthy'})
    assert values['status'] == 'enabled'
    assert values['health_reason'] is None


def test_emit_builds_nothing_when_notifications_are_off():
    class Exploding(dict):
        def __getitem__(self, key):
            raise AssertionError('a payload was built')

    off = notifier_mod.Notifier(None)
    assert payloads.emit(off, None, 'device.create', Exploding()) is False


def test_emit_sends_the_enveloped_payload_with_the_events_priority():
    recording = Recording()
    notifier = notifier_mod.Notifier(recording)
    values = sample('deployable.program.error')['payload'][
        'cyborg_object.data']
    assert payloads.emit(notifier, None, 'deployable.program.error', values)
    [(priority, event_type, payload)] = recording.sent
    assert (priority, event_type) == ('ERROR', 'deployable.program.error')
    assert payload == sample('deployable.program.error')['payload']


def test_a_payload_that_cannot_be_built_is_dropped_not_raised():
    recording = Recording()
    notifier = notifier_mod.Notifier(recording)
    assert payloads.emit(notifier, None, 'device.create', {}) is False
    assert recording.sent == []


def test_the_taint_rule_schema_is_valid_and_its_values_fit_it():
    jsonschema.Draft202012Validator.check_schema(payloads.TAINT_RULE.schema())
    data = sample('device_taint_rule.no_execute')['payload'][
        'cyborg_object.data']
    arqs = data['arqs']
    rule = {k: data[k] for k in ('uuid', 'name', 'selector', 'key', 'value',
                                 'effect', 'reason')}
    values = payloads.taint_rule_values(
        dict(rule, id=7, created_at=None),
        [dict(d, id=1, driver='x') for d in data['devices']],
        [dict(a, device_id=1) for a in arqs])
    assert values == data
