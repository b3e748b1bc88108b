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

"""The rules of a bind or unbind PATCH beyond its schema's shape."""

import pytest

from cyborg.api.controllers.v2 import arq_patch
from cyborg.common import exception

A = 'aaaaaaaa-0000-4000-8000-000000000001'
B = 'aaaaaaaa-0000-4000-8000-000000000002'
RP = '11111111-1111-4111-8111-111111111111'
INSTANCE = '22222222-2222-4222-8222-222222222222'
RULE = 'cyborg:arq:update'
BIND = [
    {'op': 'add', 'path': '/hostname', 'value': 'h1'},
    {'op': 'add', 'path': '/device_rp_uuid', 'value': RP.upper()},
    {'op': 'add', 'path': '/instance_uuid', 'value': INSTANCE},
]
UNBIND = [{'op': 'remove', 'path': '/hostname'}]
BOUND = {'hostname': 'h1', 'device_rp_uuid': RP, 'instance_uuid': INSTANCE}


def _requested(body, member=None, version=(2, 0), is_admin=False,
               max_items=10):
    return arq_patch.requested(body, member, version=version,
                               is_admin=is_admin, max_items=max_items,
                               update_rule=RULE)


def test_bind_canonicalises_uuids():
    assert _requested({A.upper(): BIND}) == arq_patch.Request(
        bind={A: BOUND}, unbind=[])


def test_unbind():
    assert _requested({A: UNBIND, B: UNBIND}) == arq_patch.Request(
        bind={}, unbind=[A, B])


def test_member_forms():
    assert _requested(BIND, member=A).bind == {A: BOUND}
    assert _requested({A: BIND}, member=A).bind == {A: BOUND}


def test_project_id_for_admins_from_2_1():
    ops = BIND + [{'op': 'add', 'path': '/project_id', 'value': 'p9'}]
    assert _requested({A: ops}, version=(2, 1), is_admin=True).bind == {
        A: dict(BOUND, project_id='p9')}
    with pytest.raises(exception.MicroversionTooLow):
        _requested({A: ops}, is_admin=True)
    with pytest.raises(exception.PolicyNotAuthorized) as error:
        _requested({A: ops}, version=(2, 1))
    assert RULE in str(error.value)


def _patch_error(reason):
    return "Couldn't apply patch. Reason: %s" % reason


@pytest.mark.parametrize('body, member, reason', [
    ({A: BIND, B: UNBIND}, None,
     'A request must either bind or unbind all of its ARQs'),
    ({A: BIND + UNBIND}, None, 'Every op must be add or remove'),
    ({A: [{'op': 'replace', 'path': '/hostname', 'value': 'h'}]}, None,
     'Every op must be add or remove'),
    ({A: [{'op': 'add', 'path': '/x', 'value': 'h'}]}, None,
     'Invalid path in patch /x'),
    ({A: [{'op': 'add', 'path': '/hostname'}]}, None,
     'Missing value for /hostname'),
    ({A: BIND + BIND[:1]}, None, 'Duplicate path in patch /hostname'),
    ({A: BIND[:1]}, None,
     'Fields absent in patch device_rp_uuid,instance_uuid'),
    ({A: BIND[:2] + [{'op': 'add', 'path': '/instance_uuid',
                      'value': 'x'}]}, None,
     'Invalid values in patch for instance_uuid'),
    ({A: [dict(BIND[0], value='')] + BIND[1:]}, None,
     'Invalid values in patch for hostname'),
    ({A: BIND, A.upper(): BIND}, None, 'ARQ %s given more than once' % A),
    ({B: BIND}, A, 'the body may only patch ARQ %s' % A),
])
def test_invalid_patches(body, member, reason):
    with pytest.raises(exception.Invalid) as error:
        _requested(body, member=member)
    assert str(error.value) == _patch_error(reason)


def test_uuids_are_checked():
    with pytest.raises(exception.InvalidUUID):
        _requested({'not-a-uuid': BIND})
    with pytest.raises(exception.InvalidUUID):
        _requested(BIND, member='not-a-uuid')


def test_at_most_max_items():
    with pytest.raises(exception.LimitExceeded):
        _requested({A: UNBIND, B: UNBIND}, max_items=1)
