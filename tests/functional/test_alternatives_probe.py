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

"""The probe behind ordered alternatives against a real Placement: the
first alternative with an allocation candidate now, in order; forbidden
traits and unknown traits honoured; the first when none has one."""

import uuid

import pytest

from cyborg.clients import placement as placement_client
from cyborg.conductor import alternatives as probe_lib
from cyborg.domain import device_profile as dp_rules

pytestmark = pytest.mark.timeout(120)


def _unique(prefix: str) -> str:
    return '%s_%s' % (prefix, uuid.uuid4().hex[:12].upper())


def _allocate(client, provider: str, resources: dict) -> str:
    consumer = str(uuid.uuid4())
    response = client.adapter.put(
        '/allocations/%s' % consumer, microversion='1.28', raise_exc=False,
        json={'allocations': {provider: {'resources': resources}},
              'project_id': str(uuid.uuid4()),
              'user_id': str(uuid.uuid4()), 'consumer_generation': None})
    assert response.status_code == 204, response.text
    return consumer


@pytest.fixture
def fleet(placement):
    """A compute node with two devices: one of class ``first`` (trait
    ``fast``), one of class ``second``, one unit each."""
    client = placement.client()
    names = {key: _unique('CUSTOM_ALT_' + key.upper())
             for key in ('first', 'second', 'fast', 'taint')}
    for key in ('first', 'second'):
        client.ensure_resource_class(names[key])
    for key in ('fast', 'taint'):
        client.ensure_trait(names[key])
    root = str(uuid.uuid4())
    client.create_provider(root, _unique('compute'))
    devices = {}
    for key in ('first', 'second'):
        devices[key] = str(uuid.uuid4())
        client.create_provider(devices[key], _unique('dev'),
                               parent_uuid=root)
        generation = client.set_inventories(devices[key], 0, {
            names[key]: {'total': 1}})
        if key == 'first':
            client.set_traits(devices[key], generation, [names['fast']])
    return client, names, devices


def _options(names, *alternatives):
    group = dp_rules.normalize_group(0, {'alternatives': [
        {'resources:' + names[rc]: 1,
         **{'trait:' + names[t]: v for t, v in traits.items()}}
        for rc, traits in alternatives]})
    return dp_rules.options(group)


def test_the_first_alternative_with_a_candidate_wins(fleet):
    client, names, devices = fleet
    prober = probe_lib.Prober(lambda: client)
    both = _options(names, ('first', {'fast': 'required'}), ('second', {}))
    assert prober.first_satisfiable([both]) == [0]
    # Its one unit taken: the second.
    consumer = _allocate(client, devices['first'], {names['first']: 1})
    assert prober.first_satisfiable([both]) == [1]
    # Freed: the first again.
    client.adapter.delete('/allocations/' + consumer)
    assert prober.first_satisfiable([both]) == [0]
    # Several groups in one call, each on its own.
    assert prober.first_satisfiable([both, list(reversed(both))]) == [0, 0]


def test_traits_decide_too(fleet):
    client, names, _devices = fleet
    prober = probe_lib.Prober(lambda: client)
    # The first device is fast: an alternative forbidding it has none.
    assert prober.first_satisfiable([_options(
        names, ('first', {'fast': 'forbidden'}),
        ('first', {'taint': 'forbidden'}))]) == [1]
    # A trait no provider has: no candidate.
    assert prober.first_satisfiable([_options(
        names, ('second', {'fast': 'required'}), ('second', {}))]) == [1]


def test_none_satisfiable_answers_the_first(fleet):
    client, names, devices = fleet
    prober = probe_lib.Prober(lambda: client)
    for key in ('first', 'second'):
        _allocate(client, devices[key], {names[key]: 1})
    options = _options(names, ('first', {}), ('second', {}))
    assert prober.first_satisfiable([options]) == [0]


def test_an_unknown_trait_is_not_satisfiable(fleet):
    client, names, _devices = fleet
    prober = probe_lib.Prober(lambda: client)
    second = _options(names, ('second', {}))[0]
    # Placement refuses a trait it does not know (400).
    unknown = dict(second, **{'trait:' + _unique('CUSTOM_NEVER'):
                              'required'})
    assert prober.first_satisfiable([[unknown, second]]) == [1]


def test_an_unreachable_placement_answers_the_first(fleet):
    _client, names, _devices = fleet
    client = placement_client.PlacementClient.for_endpoint(
        'http://127.0.0.1:1')
    options = _options(names, ('first', {}), ('second', {}))
    assert probe_lib.Prober(lambda: client).first_satisfiable(
        [options, options]) == [0, 0]


def test_without_placement_every_group_answers_its_first():
    assert probe_lib.Prober(None).first_satisfiable([[{}], [{}, {}]]) == [
        0, 0]


def test_an_alternative_is_asked_of_one_provider(fleet):
    """As Nova asks for a device profile group (one numbered request
    group): resources the devices of one tree hold only together do not
    satisfy an alternative."""
    client, names, _devices = fleet
    prober = probe_lib.Prober(lambda: client)
    together = {'resources:' + names['first']: '1',
                'resources:' + names['second']: '1'}
    alone = {'resources:' + names['second']: '1'}
    assert prober.first_satisfiable([[together, alone]]) == [1]


def test_the_tree_of_the_last_candidate_is_asked_first(fleet):
    """One query of that tree while it has a candidate; the whole fleet
    once it has none, so that the answer never changes."""
    client, names, devices = fleet
    other_root = str(uuid.uuid4())
    client.create_provider(other_root, _unique('compute'))
    other = str(uuid.uuid4())
    client.create_provider(other, _unique('dev'), parent_uuid=other_root)
    client.set_inventories(other, 0, {names['second']: {'total': 1}})
    prober = probe_lib.Prober(lambda: client)
    options = _options(names, ('second', {}))
    assert prober.first_satisfiable([options]) == [0]
    before = client.request_count
    assert prober.first_satisfiable([options]) == [0]
    assert client.request_count - before == 1
    # Whichever device answered first is taken: the other tree's still
    # satisfies the alternative (the hint's query, then the fleet's).
    taken = [_allocate(client, devices['second'], {names['second']: 1})]
    assert prober.first_satisfiable([options]) == [0]
    taken.append(_allocate(client, other, {names['second']: 1}))
    # Neither left: the hint's tree asked, then the fleet, then the next
    # alternative.
    before = client.request_count
    assert prober.first_satisfiable([_options(
        names, ('second', {}), ('first', {}))]) == [1]
    assert client.request_count - before == 3
    client.adapter.delete('/allocations/' + taken[1])
    assert prober.first_satisfiable([_options(
        names, ('first', {'taint': 'required'}), ('second', {}))]) == [1]
