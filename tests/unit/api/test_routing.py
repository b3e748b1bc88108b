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

import pytest
from webob import exc

from cyborg.api.controllers import routing


class Things(routing.Resource):
    actions = {'disable': ('POST', 'disable'), 'program': ('PATCH', 'program')}
    repeated_id_actions = frozenset(['program'])

    def get_all(self):
        pass

    def get_one(self, ident):
        pass

    def post(self):
        pass

    def disable(self, ident):
        pass

    def program(self, ident):
        pass


@pytest.mark.parametrize(
    'method, rest, handler, args',
    [
        ('GET', [], 'get_all', []),
        ('GET', [''], 'get_all', []),
        ('POST', [], 'post', []),
        ('GET', ['abc'], 'get_one', ['abc']),
        ('POST', ['abc', 'disable'], 'disable', ['abc']),
        ('PATCH', ['abc', 'program'], 'program', ['abc']),
        # openstacksdk's path: the id once more after the action.
        ('PATCH', ['abc', 'program', 'abc'], 'program', ['abc']),
    ],
)
def test_dispatch(method, rest, handler, args):
    found, found_args = routing.dispatch(Things(), method, rest)
    assert found.__name__ == handler
    assert found_args == args


@pytest.mark.parametrize(
    'method, rest, allow',
    [
        ('PUT', [], 'GET, POST'),
        ('DELETE', ['abc'], 'GET'),
        ('GET', ['abc', 'disable'], 'POST'),
        ('GET', ['abc', 'program', 'abc'], 'PATCH'),
    ],
)
def test_method_not_allowed(method, rest, allow):
    with pytest.raises(exc.HTTPMethodNotAllowed) as error:
        routing.dispatch(Things(), method, rest)
    assert error.value.headers['Allow'] == allow


@pytest.mark.parametrize(
    'rest', [['a', 'b'], ['a', 'enable'], ['a', 'b', 'c'],
             # Only the member's own id may follow, and only after an
             # action that takes it.
             ['a', 'program', 'b'], ['a', 'disable', 'a'],
             ['a', 'program', 'a', 'a']]
)
def test_not_found(rest):
    with pytest.raises(exc.HTTPNotFound):
        routing.dispatch(Things(), 'GET', rest)


class MemberPatches(Things):
    member_only = frozenset(['patch'])

    def patch(self, ident):
        pass


def test_a_member_only_handler_is_not_the_collections():
    found, args = routing.dispatch(MemberPatches(), 'PATCH', ['abc'])
    assert (found.__name__, args) == ('patch', ['abc'])
    with pytest.raises(exc.HTTPMethodNotAllowed) as error:
        routing.dispatch(MemberPatches(), 'PATCH', [])
    assert error.value.headers['Allow'] == 'GET, POST'
    assert ('PATCH', '/v2/things') not in routing.endpoints(
        {'things': MemberPatches()})
    assert ('PATCH', '/v2/things/{id}') in routing.endpoints(
        {'things': MemberPatches()})
