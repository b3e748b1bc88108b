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

"""Whose ARQs a caller reaches, and what a bind sets: the rules the API
and the conductor share (:mod:`cyborg.domain.arqs`)."""

import types

import pytest

from cyborg.api.controllers.v2 import arq_patch
from cyborg.common import exception
from cyborg.domain import arqs as arq_rules


def _context(is_admin, project_id='p1'):
    return types.SimpleNamespace(is_admin=is_admin, project_id=project_id)


def test_a_member_reaches_only_its_projects_arqs():
    assert arq_rules.project_scope(_context(False)) == 'p1'


def test_an_admin_reaches_every_project():
    assert arq_rules.project_scope(_context(True)) is None


def test_the_api_asks_for_every_field_a_bind_sets():
    ops = [{'op': 'add', 'path': '/hostname', 'value': 'h'}]
    request_all = [{'op': 'add', 'path': '/' + field,
                    'value': '7b5f0e1c-0000-4000-8000-00000000000%d' % n}
                   for n, field in enumerate(arq_rules.BIND_FIELDS)]
    uuid = '0d8bc6c5-0000-4000-8000-000000000001'
    bound = arq_patch.requested({uuid: request_all}, None, version=(2, 0),
                                is_admin=False, max_items=10,
                                update_rule='rule')
    assert set(bound.bind[uuid]) == set(arq_rules.BIND_FIELDS)
    with pytest.raises(exception.Invalid) as error:
        arq_patch.requested({uuid: ops}, None, version=(2, 0),
                            is_admin=False, max_items=10, update_rule='rule')
    for field in set(arq_rules.BIND_FIELDS) - {'hostname'}:
        assert field in str(error.value)


BINDING = {'hostname': 'h1', 'device_rp_uuid': 'rp1', 'instance_uuid': 'i1'}


def _arq(uuid, state, **fields):
    return {'uuid': uuid, 'state': state,
            **dict.fromkeys(arq_rules.BIND_FIELDS), **fields}


@pytest.mark.parametrize('state,expected', [
    ('Initial', False), ('Unbound', False), ('BindStarted', True),
    ('Bound', True), ('BindFailing', True), ('BindFailed', True)])
def test_a_bind_is_done_once_its_arqs_left_the_unbound_states(
        state, expected):
    assert arq_rules.bind_done([_arq('a', state, **BINDING)],
                               {'a': BINDING}) is expected


@pytest.mark.parametrize('arqs,bindings', [
    # Bound elsewhere: another bind's doing.
    ([_arq('a', 'Bound', **dict(BINDING, instance_uuid='i2'))],
     {'a': BINDING}),
    ([_arq('a', 'Bound', **dict(BINDING, hostname='h2'))], {'a': BINDING}),
    ([_arq('a', 'Bound', **dict(BINDING, device_rp_uuid='rp2'))],
     {'a': BINDING}),
    # One of the two not bound, or gone.
    ([_arq('a', 'Bound', **BINDING), _arq('b', 'Initial')],
     {'a': BINDING, 'b': BINDING}),
    ([_arq('a', 'Bound', **BINDING)], {'a': BINDING, 'b': BINDING}),
])
def test_a_bind_is_not_done_unless_every_arq_holds_it(arqs, bindings):
    assert not arq_rules.bind_done(arqs, bindings)


def test_an_unbind_is_done_once_every_arq_is_unbound():
    assert arq_rules.unbind_done([_arq('a', 'Unbound'), _arq('b', 'Initial')],
                                 ['a', 'b'])
    assert not arq_rules.unbind_done(
        [_arq('a', 'Unbound'), _arq('b', 'Bound', **BINDING)], ['a', 'b'])
    # Gone: not an unbind's doing.
    assert not arq_rules.unbind_done([_arq('a', 'Unbound')], ['a', 'b'])
