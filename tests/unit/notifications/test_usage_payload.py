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

"""The accelerator_request.exists payload, its schema and its sample."""

import datetime
import json
import os

import jsonschema
import pytest

from cyborg.domain import usage
from cyborg.domain import utilization
from cyborg.notifications import usage as usage_payload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SAMPLE = os.path.join(ROOT, 'doc', 'notification_samples',
                      usage.EVENT_TYPE + '.json')


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        usage_payload.schema(),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def built(**kw) -> dict:
    """The payload of a record as the audit stores and sends it."""
    start = datetime.datetime(2030, 1, 1, 10)
    values = dict(arq_uuid='a0d3b9c4-5d1e-4c3b-9f4a-2b7e8c1d6f01',
                  project_id='p1',
                  instance_uuid='6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d',
                  device_profile_name='gpu', resource_class='PGPU',
                  vendor='10de', model='20b0', host='compute-1',
                  bound_at=start + datetime.timedelta(minutes=15))
    values.update(kw)
    record = usage.records([usage.Interval(**values)], start,
                           start + datetime.timedelta(hours=1))[0]
    return usage_payload.envelope(json.loads(usage.dumps(record)))


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(usage_payload.schema())


def test_the_sample_is_valid():
    with open(SAMPLE) as f:
        sample = json.load(f)
    assert sample['event_type'] == usage.EVENT_TYPE
    assert sample['priority'] == 'INFO'
    validator().validate(sample['payload'])


def test_the_sample_has_every_field_in_order():
    with open(SAMPLE) as f:
        data = json.load(f)['payload']['cyborg_object.data']
    assert list(data) == list(usage_payload.FIELDS)


@pytest.mark.parametrize('kw', [
    {},
    {'project_id': None, 'instance_uuid': None, 'vendor': None,
     'model': None, 'resource_class': None, 'host': None,
     'device_profile_name': None},
    {'utilization': utilization.stored_form(
        {'gpu_percent': 12.5, 'memory_used_mib': 10},
        datetime.datetime(2030, 1, 1, 11, 0, 5))},
])
def test_what_the_audit_builds_is_valid(kw):
    payload = built(**kw)
    validator().validate(payload)
    assert payload['cyborg_object.name'] == 'AcceleratorRequestExistsPayload'
    assert payload['cyborg_object.data']['bound_seconds'] == 2700


def test_a_record_without_seconds_is_refused():
    payload = built()
    payload['cyborg_object.data']['bound_seconds'] = 0
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(payload)
