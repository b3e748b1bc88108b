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
