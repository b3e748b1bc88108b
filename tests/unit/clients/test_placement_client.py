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

"""Unit tests of cyborg.clients.placement with a fake HTTP transport.

The client runs over a real keystoneauth1 Session and Adapter (so the
headers keystoneauth adds are checked too); only the requests transport
is replaced.
"""

from __future__ import annotations

import json
import threading

from keystoneauth1 import token_endpoint
from oslo_config import cfg
import pytest
import requests

from cyborg.clients import placement
from cyborg.conf import placement as placement_conf
from tests.unit import fakes

URL = 'http://placement.test:8778'
RP = '4e8e5957-649f-477b-9e5b-f1f75b21c03c'


FakeTransport = fakes.FakeTransport


@pytest.fixture
def transport():
    return FakeTransport()


@pytest.fixture
def client(transport):
    adapter = placement.adapter_from_endpoint(URL + '/')
    adapter.session.session.mount('http://', transport)
    return placement.PlacementClient(adapter)


def error(status, code=None, detail='It went wrong.'):
    entry = {
        'status': status,
        'title': 'Error',
        'detail': detail,
        'request_id': 'req-1',
    }
    if code:
        entry['code'] = code
    return {'errors': [entry]}


def body_of(request) -> dict:
    return json.loads(request.body)


# Request construction ------------------------------------------------------


def test_create_provider_request(client, transport):
    provider = {'uuid': RP, 'name': 'dev', 'generation': 0}
    transport.reply(200, provider)
    assert client.create_provider(RP, 'dev', parent_uuid='p-uuid') == provider
    sent = transport.last
    assert sent.method == 'POST'
    assert sent.url == URL + '/resource_providers'
    assert sent.headers['OpenStack-API-Version'] == 'placement 1.26'
    assert sent.headers['X-Auth-Token'] == 'admin'
    assert sent.headers['Accept'] == 'application/json'
    assert body_of(sent) == {
        'uuid': RP,
        'name': 'dev',
        'parent_provider_uuid': 'p-uuid',
    }


def test_create_root_provider_sends_no_parent(client, transport):
    transport.reply(200, {'uuid': RP})
    client.create_provider(RP, 'cn')
    assert body_of(transport.last) == {'uuid': RP, 'name': 'cn'}


def test_find_provider_by_name_quotes(client, transport):
    transport.reply(200, {'resource_providers': [{'uuid': RP}]})
    assert client.find_provider_by_name('a b&c=d/e') == {'uuid': RP}
    assert transport.last.method == 'GET'
    assert transport.last.url == (
        URL + '/resource_providers?name=a%20b%26c%3Dd%2Fe'
    )


def test_find_provider_by_name_none(client, transport):
    transport.reply(200, {'resource_providers': []})
    assert client.find_provider_by_name('x') is None


def test_get_provider(client, transport):
    transport.reply(200, {'uuid': RP, 'generation': 3})
    assert client.get_provider(RP)['generation'] == 3
    assert transport.last.url == URL + '/resource_providers/' + RP
    transport.reply(404, error(404))
    assert client.get_provider(RP) is None


def test_delete_provider(client, transport):
    transport.reply(204)
    assert client.delete_provider(RP) is True
    assert transport.last.method == 'DELETE'
    transport.reply(404, error(404))
    assert client.delete_provider(RP) is False


def test_set_inventories(client, transport):
    inventories = {'CUSTOM_X': {'total': 2, 'reserved': 2}}
    transport.reply(
        200, {'resource_provider_generation': 6, 'inventories': inventories}
    )
    assert client.set_inventories(RP, 5, inventories) == 6
    sent = transport.last
    assert sent.method == 'PUT'
    assert sent.url == URL + '/resource_providers/%s/inventories' % RP
    assert body_of(sent) == {
        'resource_provider_generation': 5,
        'inventories': inventories,
    }


def test_get_inventories_and_traits(client, transport):
    transport.reply(
        200,
        {
            'resource_provider_generation': 2,
            'inventories': {'VGPU': {'total': 1}},
        },
    )
    assert client.get_inventories(RP) == (2, {'VGPU': {'total': 1}})
    transport.reply(
        200, {'resource_provider_generation': 2, 'traits': ['CUSTOM_T']}
    )
    assert client.get_traits(RP) == (2, ['CUSTOM_T'])
    assert transport.last.url == URL + '/resource_providers/%s/traits' % RP


def test_set_traits(client, transport):
    transport.reply(
        200, {'resource_provider_generation': 1, 'traits': ['CUSTOM_T']}
    )
    assert client.set_traits(RP, 0, ('CUSTOM_T',)) == 1
    assert body_of(transport.last) == {
        'resource_provider_generation': 0,
        'traits': ['CUSTOM_T'],
    }


def test_provider_tree(client, transport):
    transport.reply(200, {'resource_providers': [{'uuid': RP}]})
    assert client.provider_tree(RP) == [{'uuid': RP}]
    assert transport.last.url == URL + '/resource_providers?in_tree=' + RP


RP2 = '0b6a4a47-2f5e-4d8a-9d1e-3c2b1a0f9e8d'


def test_reshape_inventories_request(client, transport):
    inventories = {'CUSTOM_X': {'total': 2, 'reserved': 0}}
    transport.reply(204)
    client.reshape_inventories({RP: (3, inventories), RP2: (0, {})})
    sent = transport.last
    assert sent.method == 'POST'
    assert sent.url == URL + '/reshaper'
    assert sent.headers['OpenStack-API-Version'] == 'placement 1.30'
    assert body_of(sent) == {
        'inventories': {
            RP: {'resource_provider_generation': 3,
                 'inventories': inventories},
            RP2: {'resource_provider_generation': 0, 'inventories': {}},
        },
        'allocations': {},
    }
    assert client.request_count == 1


@pytest.mark.parametrize(
    'status, expected',
    [
        (403, placement.Forbidden),
        (406, placement.MicroversionUnsupported),
        (400, placement.PlacementError),
        (404, placement.PlacementError),
    ],
)
def test_reshape_refusals(client, transport, status, expected):
    transport.reply(status, error(status, None, 'refused'),
                    headers={'x-openstack-request-id': 'req-3'})
    with pytest.raises(expected, match='POST /reshaper .*refused') as info:
        client.reshape_inventories({RP: (1, {})})
    assert type(info.value) is expected
    assert info.value.status_code == status
    assert info.value.request_id == 'req-3'


@pytest.mark.parametrize(
    'code, expected',
    [
        (placement.CODE_CONCURRENT_UPDATE, placement.GenerationConflict),
        (placement.CODE_INVENTORY_IN_USE, placement.InventoryInUse),
    ],
)
def test_reshape_conflicts(client, transport, code, expected):
    transport.reply(409, error(409, code))
    with pytest.raises(expected):
        client.reshape_inventories({RP: (1, {})})


def test_reshape_server_error_is_unavailable(client, transport):
    transport.reply(503, error(503))
    with pytest.raises(placement.PlacementUnavailable) as info:
        client.reshape_inventories({RP: (1, {})})
    assert info.value.status_code == 503


def test_roles_are_sent_as_x_roles(transport):
    adapter = placement.adapter_from_endpoint(URL, roles=('admin',
                                                          'service'))
    adapter.session.session.mount('http://', transport)
    client = placement.PlacementClient(adapter)
    transport.reply(200, {'uuid': RP, 'generation': 0})
    client.get_provider(RP)
    assert transport.last.headers['X-Roles'] == 'admin,service'
    assert transport.last.headers['X-Auth-Token'] == 'admin'


def test_no_roles_header_by_default(client, transport):
    transport.reply(200, {'uuid': RP, 'generation': 0})
    client.get_provider(RP)
    assert 'X-Roles' not in transport.last.headers


def test_for_endpoint_with_roles():
    client = placement.PlacementClient.for_endpoint(
        URL, token='cyborg', roles=['service'])
    assert client.adapter.session.additional_headers == {
        'X-Roles': 'service'}
    assert client.adapter.session.auth.token == 'cyborg'


def test_standard_resource_class_and_trait_cost_nothing(client, transport):
    client.ensure_resource_class('VGPU')
    client.ensure_resource_class('FPGA')
    client.ensure_trait('HW_CPU_X86_AVX2')
    assert transport.sent == []
    assert client.request_count == 0


def test_custom_resource_class_and_trait(client, transport):
    transport.reply(201)
    client.ensure_resource_class('CUSTOM_ACCEL_X')
    assert transport.last.method == 'PUT'
    assert transport.last.url == URL + '/resource_classes/CUSTOM_ACCEL_X'
    assert transport.last.headers['OpenStack-API-Version'] == (
        'placement 1.26'
    )
    transport.reply(204)
    client.ensure_trait('CUSTOM_T')
    assert transport.last.url == URL + '/traits/CUSTOM_T'
    assert client.request_count == 2


def test_check_version(client, transport):
    transport.reply(
        200,
        {
            'versions': [
                {'id': 'v1.0', 'max_version': '1.39', 'min_version': '1.0'}
            ]
        },
    )
    assert client.check_version() == '1.39'
    assert transport.last.url == URL + '/'
    assert 'OpenStack-API-Version' not in transport.last.headers


def test_check_version_too_old(client, transport):
    transport.reply(200, {'versions': [{'max_version': '1.25'}]})
    with pytest.raises(placement.PlacementError, match='1.25'):
        client.check_version()


def test_check_version_compares_numerically(client, transport):
    transport.reply(200, {'versions': [{'max_version': '1.100'}]})
    assert client.check_version() == '1.100'


def test_global_request_id_from_context(client, transport, monkeypatch):
    class Context:
        global_id = 'req-0b7c4a40-ff5f-4b5c-a6c4-2f5cbab0e1a1'

    monkeypatch.setattr(placement.oslo_context, 'get_current', Context)
    transport.reply(200, {'resource_providers': []})
    client.find_provider_by_name('x')
    assert transport.last.headers['X-OpenStack-Request-ID'] == (
        Context.global_id
    )


def test_no_global_request_id_without_context(client, transport, monkeypatch):
    monkeypatch.setattr(placement.oslo_context, 'get_current', lambda: None)
    transport.reply(200, {'resource_providers': []})
    client.find_provider_by_name('x')
    assert 'X-OpenStack-Request-ID' not in transport.last.headers


# Error mapping ---------------------------------------------------------------


def test_generation_conflict(client, transport):
    transport.reply(
        409,
        error(
            409,
            placement.CODE_CONCURRENT_UPDATE,
            'resource provider generation conflict',
        ),
        headers={'x-openstack-request-id': 'req-9'},
    )
    with pytest.raises(placement.GenerationConflict) as info:
        client.set_traits(RP, 0, [])
    e = info.value
    assert e.status_code == 409
    assert e.code == placement.CODE_CONCURRENT_UPDATE
    assert e.request_id == 'req-9'
    assert 'resource provider generation conflict' in str(e)
    assert 'PUT /resource_providers/%s/traits' % RP in str(e)


@pytest.mark.parametrize(
    'code, expected',
    [
        (placement.CODE_PROVIDER_IN_USE, placement.ProviderInUse),
        (placement.CODE_CANNOT_DELETE_PARENT, placement.ProviderHasChildren),
        (None, placement.ProviderInUse),
    ],
)
def test_delete_conflicts(client, transport, code, expected):
    transport.reply(409, error(409, code, 'has allocations'))
    with pytest.raises(expected, match='has allocations') as info:
        client.delete_provider(RP)
    assert isinstance(info.value, placement.ProviderInUse)


@pytest.mark.parametrize('code', [placement.CODE_DUPLICATE_NAME, None])
def test_create_conflict(client, transport, code):
    transport.reply(409, error(409, code, 'Conflicting resource provider'))
    with pytest.raises(placement.ProviderConflict):
        client.create_provider(RP, 'dev')


def test_inventory_in_use(client, transport):
    transport.reply(409, error(409, placement.CODE_INVENTORY_IN_USE))
    with pytest.raises(placement.InventoryInUse):
        client.set_inventories(RP, 1, {})


def test_unknown_conflict_is_plain_error(client, transport):
    transport.reply(409, error(409, 'placement.something_new'))
    with pytest.raises(placement.PlacementError) as info:
        client.set_inventories(RP, 1, {})
    assert type(info.value) is placement.PlacementError


@pytest.mark.parametrize(
    'call',
    [
        lambda c: c.get_inventories(RP),
        lambda c: c.get_traits(RP),
        lambda c: c.set_inventories(RP, 0, {}),
        lambda c: c.set_traits(RP, 0, []),
    ],
)
def test_missing_provider(client, transport, call):
    transport.reply(404, error(404, None, 'No resource provider'))
    with pytest.raises(placement.ProviderNotFound, match='No resource'):
        call(client)


@pytest.mark.parametrize('status', [400, 401, 403, 406])
def test_client_errors_are_not_swallowed(client, transport, status):
    transport.reply(status, error(status, None, 'bad request text'))
    with pytest.raises(
        placement.PlacementError, match='HTTP %d: bad request text' % status
    ) as info:
        client.ensure_trait('CUSTOM_BAD')
    assert type(info.value) is placement.PlacementError
    assert info.value.status_code == status


def test_not_found_trait_is_plain_error(client, transport):
    transport.reply(404, error(404))
    with pytest.raises(placement.PlacementError) as info:
        client.ensure_trait('CUSTOM_T')
    assert type(info.value) is placement.PlacementError


def test_non_json_error_body(client, transport):
    transport.reply(400, None)
    with pytest.raises(placement.PlacementError, match='HTTP 400'):
        client.get_provider(RP)


@pytest.mark.parametrize('status', [500, 502, 503, 504])
def test_server_errors_are_unavailable(client, transport, status):
    transport.reply(status, error(status))
    with pytest.raises(placement.PlacementUnavailable) as info:
        client.get_provider(RP)
    assert info.value.status_code == status


@pytest.mark.parametrize(
    'exception',
    [
        requests.exceptions.ConnectionError('refused'),
        requests.exceptions.ConnectTimeout('slow'),
        requests.exceptions.ReadTimeout('slower'),
    ],
)
def test_connection_errors_are_unavailable(client, transport, exception):
    transport.fail(exception)
    with pytest.raises(placement.PlacementUnavailable) as info:
        client.get_provider(RP)
    assert info.value.status_code is None
    assert client.request_count == 1


# request_count ---------------------------------------------------------


def test_request_count_is_thread_safe(client, transport):
    for _ in range(400):
        transport.reply(200, {'resource_providers': []})
    lock = threading.Lock()
    original = transport.send

    def send(request, **kwargs):
        with lock:
            return original(request, **kwargs)

    transport.send = send

    def work():
        for _ in range(100):
            client.find_provider_by_name('x')

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert client.request_count == 400
    client.request_count = 0
    assert client.request_count == 0


# Configuration ---------------------------------------------------------------


def test_conf_defaults():
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf([], default_config_files=[])
    assert conf.placement.service_type == 'placement'
    assert conf.placement.valid_interfaces == ['internal', 'public']


def test_list_opts():
    ((group, opts),) = placement_conf.list_opts().items()
    assert group.name == 'placement'
    names = [opt.dest for opt in opts]
    assert len(names) == len(set(names))
    for name in (
        'auth_type',
        'auth_url',
        'username',
        'password',
        'service_type',
        'valid_interfaces',
        'endpoint_override',
        'timeout',
        'cafile',
    ):
        assert name in names
    defaults = {opt.dest: opt.default for opt in opts}
    assert defaults['service_type'] == 'placement'
    assert defaults['valid_interfaces'] == ['internal', 'public']


def test_from_conf_without_keystone(tmp_path):
    # The plugin's options (endpoint, token) are registered when it is
    # loaded, so they come from a file, as in a deployment.
    config = tmp_path / 'cyborg.conf'
    config.write_text(
        '[placement]\nauth_type = admin_token\n'
        'endpoint = %s\ntoken = admin\n'
        'endpoint_override = %s\n' % (URL, URL)
    )
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf([], default_config_files=[str(config)])
    client = placement.PlacementClient.from_conf(conf)
    assert isinstance(client.adapter.auth, token_endpoint.Token)
    assert client.adapter.auth.token == 'admin'
    assert client.adapter.service_type == 'placement'
    assert client.adapter.get_endpoint() == URL


def test_update_provider_request(client, transport):
    parent = '6a1f2c3e-5b7d-4e9f-8a0b-1c2d3e4f5a6b'
    transport.reply(200, {'uuid': RP, 'name': 'new', 'generation': 4,
                          'parent_provider_uuid': parent})
    assert client.update_provider(RP, 'new', parent)['generation'] == 4
    sent = transport.last
    assert (sent.method, sent.url) == ('PUT',
                                       URL + '/resource_providers/' + RP)
    assert sent.headers['OpenStack-API-Version'] == 'placement 1.37'
    assert body_of(sent) == {'name': 'new', 'parent_provider_uuid': parent}


@pytest.mark.parametrize('status, code, expected', [
    (406, None, placement.MicroversionUnsupported),
    (409, 'placement.duplicate_name', placement.ProviderConflict),
    (404, None, placement.ProviderNotFound),
])
def test_update_provider_refusals(client, transport, status, code, expected):
    transport.reply(status, error(status, code))
    with pytest.raises(expected) as info:
        client.update_provider(RP, 'new', None)
    assert type(info.value) is expected


def test_provider_allocations(client, transport):
    transport.reply(200, {'resource_provider_generation': 2, 'allocations': {
        'c1': {'resources': {'FPGA': 1}}}})
    assert client.provider_allocations(RP) == {
        'c1': {'resources': {'FPGA': 1}}}
    assert transport.last.url == (URL + '/resource_providers/' + RP
                                  + '/allocations')
