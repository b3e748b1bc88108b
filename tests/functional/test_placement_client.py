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

"""The Placement client against a real Placement (openstack-placement).

All tests share one session-scoped :class:`PlacementServer`; each uses
its own provider names, resource classes and traits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from cyborg.allinone import embedded_placement
from cyborg.clients import placement as placement_client
from tests.functional import placement as placement_lib
from tests.functional import servers

# Until tests/functional/conftest.py exposes the fixture.

pytestmark = pytest.mark.timeout(300)


def unique(prefix: str) -> str:
    return '%s_%s' % (prefix, uuid.uuid4().hex[:12].upper())


def new_uuid() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def client(placement):
    return placement.client()


@pytest.fixture
def tree(client):
    """A compute-node root provider and one child."""
    root, child = new_uuid(), new_uuid()
    client.create_provider(root, unique('compute'))
    client.create_provider(child, unique('device'), parent_uuid=root)
    return root, child


def allocate(client, consumer, provider, resources):
    """PUT /allocations/{consumer} (1.28) straight through the adapter."""
    response = client.adapter.put(
        '/allocations/%s' % consumer, microversion='1.28', raise_exc=False,
        json={'allocations': {provider: {'resources': resources}},
              'project_id': new_uuid(), 'user_id': new_uuid(),
              'consumer_generation': None})
    assert response.status_code == 204, response.text


def test_check_version(client):
    version = client.check_version()
    assert tuple(map(int, version.split('.'))) >= (1, 26)


def test_provider_tree(client):
    root, child = new_uuid(), new_uuid()
    root_name, child_name = unique('compute node'), unique('dev/0 & more')
    created = client.create_provider(root, root_name)
    assert created['uuid'] == root
    assert created['generation'] == 0
    assert created['root_provider_uuid'] == root
    created = client.create_provider(child, child_name, parent_uuid=root)
    assert created['parent_provider_uuid'] == root
    assert created['root_provider_uuid'] == root

    assert client.get_provider(child)['name'] == child_name
    assert client.get_provider(new_uuid()) is None
    assert client.find_provider_by_name(child_name)['uuid'] == child
    assert client.find_provider_by_name(root_name)['uuid'] == root
    assert client.find_provider_by_name(unique('nothing')) is None
    for member in (root, child):
        assert {p['uuid'] for p in client.provider_tree(member)} == {
            root, child}


def test_create_conflicts(client, tree):
    root, _child = tree
    name = client.get_provider(root)['name']
    with pytest.raises(placement_client.ProviderConflict) as info:
        client.create_provider(new_uuid(), name)
    assert info.value.status_code == 409
    assert info.value.code == placement_client.CODE_DUPLICATE_NAME
    with pytest.raises(placement_client.ProviderConflict):
        client.create_provider(root, unique('other'))


def test_inventories_reserved_equals_total(client, tree):
    _root, child = tree
    rc = unique('CUSTOM_ACCEL')
    client.ensure_resource_class(rc)
    client.ensure_resource_class(rc)  # idempotent
    generation = client.get_provider(child)['generation']
    inventories = {rc: {'total': 4, 'reserved': 4},
                   'VGPU': {'total': 2, 'reserved': 0, 'max_unit': 1}}
    new_generation = client.set_inventories(child, generation, inventories)
    assert new_generation == generation + 1
    got_generation, got = client.get_inventories(child)
    assert got_generation == new_generation
    assert got[rc]['total'] == got[rc]['reserved'] == 4
    assert got['VGPU']['max_unit'] == 1


def test_traits(client, tree):
    _root, child = tree
    custom = unique('CUSTOM_TRAIT')
    standard = 'HW_CPU_X86_AVX2'
    client.ensure_trait(custom)
    client.ensure_trait(custom)  # idempotent
    client.ensure_trait(standard)
    generation = client.get_provider(child)['generation']
    new_generation = client.set_traits(child, generation, [custom, standard])
    assert new_generation == generation + 1
    got_generation, traits = client.get_traits(child)
    assert got_generation == new_generation
    assert sorted(traits) == sorted([custom, standard])


def test_unknown_trait_is_an_error(client, tree):
    _root, child = tree
    with pytest.raises(placement_client.PlacementError) as info:
        client.set_traits(child, 0, [unique('CUSTOM_NEVER_CREATED')])
    assert info.value.status_code == 400
    assert 'CUSTOM_NEVER_CREATED' in str(info.value)


def test_invalid_resource_class_is_an_error(client):
    with pytest.raises(placement_client.PlacementError) as info:
        client.ensure_resource_class('NOT_CUSTOM_%s' % uuid.uuid4().hex)
    assert info.value.status_code == 400


def test_generation_conflicts(client, tree):
    _root, child = tree
    rc = unique('CUSTOM_ACCEL')
    client.ensure_resource_class(rc)
    generation = client.get_provider(child)['generation']
    client.set_inventories(child, generation, {rc: {'total': 1}})
    with pytest.raises(placement_client.GenerationConflict) as info:
        client.set_inventories(child, generation, {rc: {'total': 2}})
    assert info.value.status_code == 409
    assert info.value.code == placement_client.CODE_CONCURRENT_UPDATE
    with pytest.raises(placement_client.GenerationConflict):
        client.set_traits(child, generation, [])


def _generations(client, *uuids) -> dict[str, int]:
    return {uuid: client.get_provider(uuid)['generation'] for uuid in uuids}


def _totals(client, rc, *uuids) -> dict[str, int | None]:
    return {uuid: client.get_inventories(uuid)[1].get(rc, {}).get('total')
            for uuid in uuids}


@pytest.fixture
def two_children(client, tree):
    """A compute node with two children, and a custom resource class."""
    root, child = tree
    other = new_uuid()
    client.create_provider(other, unique('device'), parent_uuid=root)
    rc = unique('CUSTOM_RESHAPED')
    client.ensure_resource_class(rc)
    return child, other, rc


@pytest.mark.parametrize('how', ['service token', 'X-Roles service'])
def test_reshape_inventories(placement, client, two_children, how):
    child, other, rc = two_children
    service = (placement.service_client() if how == 'service token' else
               placement_client.PlacementClient.for_endpoint(
                   placement.url, roles=['service']))
    before = _generations(client, child, other)
    service.reshape_inventories({
        child: (before[child], {rc: {'total': 2, 'reserved': 0}}),
        other: (before[other], {rc: {'total': 3, 'reserved': 3}}),
    })
    assert service.request_count == 1
    assert _totals(client, rc, child, other) == {child: 2, other: 3}
    assert client.get_inventories(other)[1][rc]['reserved'] == 3
    after = _generations(client, child, other)
    assert all(after[uuid] > before[uuid] for uuid in after)
    # Replaced, not merged: an empty inventory removes the class.
    service.reshape_inventories({child: (after[child], {})})
    assert _totals(client, rc, child) == {child: None}


def test_reshape_is_all_or_nothing(placement, client, two_children):
    child, other, rc = two_children
    service = placement.service_client()
    generations = _generations(client, child, other)
    with pytest.raises(placement_client.GenerationConflict) as info:
        service.reshape_inventories({
            child: (generations[child], {rc: {'total': 1}}),
            other: (generations[other] + 1, {rc: {'total': 1}}),
        })
    assert info.value.code == placement_client.CODE_CONCURRENT_UPDATE
    with pytest.raises(placement_client.PlacementError) as info:
        service.reshape_inventories({
            child: (generations[child], {rc: {'total': 1}}),
            new_uuid(): (0, {rc: {'total': 1}}),
        })
    assert info.value.status_code == 400
    assert _totals(client, rc, child, other) == {child: None, other: None}
    assert _generations(client, child, other) == generations


def test_reshape_needs_the_service_role(placement, client, two_children):
    child, _other, rc = two_children
    generation = client.get_provider(child)['generation']
    admin_only = placement_client.PlacementClient.for_endpoint(
        placement.url, token=placement_lib.SERVICE_TOKEN, roles=['admin'])
    for user in (client, admin_only):
        with pytest.raises(placement_client.Forbidden) as info:
            user.reshape_inventories({child: (generation, {rc: {'total': 1}})})
        assert info.value.status_code == 403
        assert 'placement:reshaper:reshape' in str(info.value)
    assert client.get_provider(child)['generation'] == generation


def test_missing_provider(client):
    with pytest.raises(placement_client.ProviderNotFound):
        client.get_inventories(new_uuid())
    with pytest.raises(placement_client.ProviderNotFound):
        client.set_traits(new_uuid(), 0, [])


def test_delete(client, tree):
    root, child = tree
    rc = unique('CUSTOM_ACCEL')
    client.ensure_resource_class(rc)
    client.set_inventories(child, client.get_provider(child)['generation'],
                           {rc: {'total': 2}})
    consumer = new_uuid()
    allocate(client, consumer, child, {rc: 1})

    with pytest.raises(placement_client.ProviderInUse) as info:
        client.delete_provider(child)
    assert info.value.status_code == 409
    assert info.value.code == placement_client.CODE_PROVIDER_IN_USE
    with pytest.raises(placement_client.ProviderHasChildren):
        client.delete_provider(root)

    response = client.adapter.delete('/allocations/%s' % consumer,
                                     microversion='1.28', raise_exc=False)
    assert response.status_code == 204
    assert client.delete_provider(child) is True
    assert client.delete_provider(child) is False
    assert client.get_provider(child) is None
    assert client.delete_provider(root) is True


def test_allocation_candidates(client, tree):
    root, child = tree
    full = new_uuid()
    client.create_provider(full, unique('full'), parent_uuid=root)
    rc, trait = unique('CUSTOM_X'), unique('CUSTOM_T')
    client.ensure_resource_class(rc)
    client.ensure_trait(trait)
    for provider, reserved in ((child, 0), (full, 2)):
        generation = client.get_provider(provider)['generation']
        generation = client.set_inventories(
            provider, generation, {rc: {'total': 2, 'reserved': reserved}})
        client.set_traits(provider, generation, [trait])

    response = client.request(
        'GET', '/allocation_candidates?resources=%s:1&required=%s'
        % (rc, trait))
    requests_ = response.json()['allocation_requests']
    assert [list(r['allocations']) for r in requests_] == [[child]]
    assert requests_[0]['allocations'][child]['resources'] == {rc: 1}


def test_request_count(client, tree):
    _root, child = tree
    before = client.request_count
    client.ensure_resource_class('VGPU')
    client.ensure_trait('HW_CPU_X86_AVX2')
    assert client.request_count == before
    client.get_provider(child)
    client.get_provider(new_uuid())
    client.get_traits(child)
    with pytest.raises(placement_client.ProviderNotFound):
        client.get_traits(new_uuid())
    assert client.request_count == before + 4


def test_from_conf_without_keystone(placement, tmp_path):
    from oslo_config import cfg

    from cyborg.conf import placement as placement_conf

    config = tmp_path / 'cyborg.conf'
    config.write_text('[placement]\nauth_type = admin_token\n'
                      'endpoint = %s\ntoken = admin\n'
                      'endpoint_override = %s\n'
                      % (placement.url, placement.url))
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf([], default_config_files=[str(config)])
    client = placement_client.PlacementClient.from_conf(conf)
    client.check_version()
    assert client.find_provider_by_name(unique('none')) is None


def test_unavailable():
    client = placement_client.PlacementClient.for_endpoint(
        'http://%s:%d' % (servers.LOOPBACK, servers.free_port()), timeout=5)
    with pytest.raises(placement_client.PlacementUnavailable):
        client.get_provider(new_uuid())


def test_ensure_compute_node(client):
    name = unique('compute')
    first = embedded_placement.ensure_compute_node(client, name)
    assert embedded_placement.ensure_compute_node(client, name) == first
    provider = client.get_provider(first)
    assert provider['name'] == name
    assert provider['parent_provider_uuid'] is None

    child_name = unique('device')
    client.create_provider(new_uuid(), child_name, parent_uuid=first)
    with pytest.raises(placement_client.ProviderConflict):
        embedded_placement.ensure_compute_node(client, child_name)


EMBEDDED_SCRIPT = textwrap.dedent('''
    import socket, sys
    from cyborg.allinone import embedded_placement as ep
    state_dir = sys.argv[1]
    server = ep.start(state_dir)
    client = server.client()
    print('version', client.check_version())
    node = ep.ensure_compute_node(client, 'allinone-node')
    assert ep.ensure_compute_node(client, 'allinone-node') == node
    port = server.port
    server.stop()
    server.stop()
    try:
        socket.create_connection(('127.0.0.1', port), timeout=2).close()
        sys.exit('still listening after stop')
    except ConnectionRefusedError:
        pass
    # Same database again: allowed, and the data is still there.
    with ep.start(state_dir) as again:
        assert ep.ensure_compute_node(again.client(), 'allinone-node') == node
    # Another database: refused (placement's global state).
    try:
        ep.start(state_dir + '-other')
        sys.exit('second database accepted')
    except ep.EmbeddedPlacementError:
        pass
    print('OK', node)
''')


def test_embedded_placement_in_subprocess(tmp_path):
    state_dir = str(tmp_path / 'state')
    result = subprocess.run(
        [sys.executable, '-c', EMBEDDED_SCRIPT, state_dir],
        capture_output=True, text=True, timeout=120, check=False,
        stdin=subprocess.DEVNULL, start_new_session=True,
        cwd=str(tmp_path), env=dict(os.environ, PYTHONUNBUFFERED='1'))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith('version 1.')
    assert lines[-1].startswith('OK ')
    assert os.path.exists(os.path.join(state_dir, 'placement.sqlite'))
    assert not os.path.exists(state_dir + '-other')

