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


"""The conductor and agent RPC API versions, their history, and the
``[upgrade_levels]`` caps (cyborg.conductor.rpcapi, cyborg.agent.rpcapi).
"""

import inspect
import re
import threading
from unittest import mock

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import constants
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi

#: The version each method of the APIs needs; a method added or changed
#: in a later version goes here with it.
CONDUCTOR_METHODS = {
    'device_profile_create': '1.0', 'device_profile_delete': '1.0',
    'service_heartbeat': '1.0', 'report_inventory': '1.3',
    'device_set_status': '1.0', 'attribute_create': '1.0',
    'attribute_delete': '1.0', 'arq_create': '1.0', 'arq_bind': '1.0',
    'arq_unbind': '1.0', 'arq_delete': '1.0',
    'deployable_program': '1.1', 'bound_devices': '1.4',
    'taint_rule_create': '1.5', 'taint_rule_delete': '1.5',
    'device_profile_update': '1.6',
    'alternatives_probe': '1.7', 'device_set_partitions': '1.8',
    'prepared_handles': '1.9', 'handles_restored': '1.9',
    'partition_switch': '1.10',
}
AGENT_METHODS = {
    'prepare_attach_handle': '1.3', 'release_attach_handle': '1.3',
    'program_image': '1.2', 'set_partitions': '1.4',
}
#: Public methods of a client that send nothing.
LOCAL_METHODS = {'with_timeout'}


def _history(api) -> list[str]:
    return re.findall(r'^\s*\* (\d+\.\d+) - ', api.__doc__, re.M)


@pytest.mark.parametrize('api,endpoint,methods', [
    (conductor_rpcapi.ConductorAPI, conductor_manager.ConductorManager,
     CONDUCTOR_METHODS),
    (agent_rpcapi.AgentAPI, agent_manager.AgentManager, AGENT_METHODS)])
def test_each_api_has_its_version_and_its_history(api, endpoint, methods):
    assert endpoint.target.version == api.RPC_API_VERSION
    history = _history(api)
    assert history[0] == api.BASE_VERSION == '1.0'
    assert history[-1] == api.RPC_API_VERSION
    assert max(methods.values(), key=lambda v: tuple(map(int, v.split('.')))
               ) == api.RPC_API_VERSION
    public = {name for name, _ in inspect.getmembers(api, inspect.isfunction)
              if not name.startswith('_') and name not in LOCAL_METHODS}
    assert public == set(methods)


def test_the_two_apis_are_versioned_apart():
    assert conductor_manager.ConductorManager.target.version is (
        constants.CONDUCTOR_RPC_API_VERSION)
    assert agent_manager.AgentManager.target.version is (
        constants.AGENT_RPC_API_VERSION)
    assert 'RPC_API_VERSION' not in vars(constants)


class _Recorder:
    """An RPC client that records what each call would send."""

    def __init__(self, version, version_cap=None, options=None, sent=None):
        self.version = version
        self.version_cap = version_cap
        self.options = options or {}
        self.sent = [] if sent is None else sent

    def prepare(self, **options):
        merged = dict(self.options, **options)
        return _Recorder(self.version, self.version_cap, merged, self.sent)

    def can_send_version(self, version):
        cap = self.version_cap
        return cap is None or tuple(map(int, version.split('.'))) <= tuple(
            map(int, cap.split('.')))

    def _send(self, method):
        self.sent.append((method, self.options.get('version', self.version),
                          self.options))

    def call(self, context, method, **kwargs):
        self._send(method)
        self.options.setdefault('kwargs', []).append(kwargs)
        return self.options.get('answers', {}).get(method, {})

    def cast(self, context, method, **kwargs):
        self._send(method)


def _recording(monkeypatch):
    clients = []

    def get_client(transport, topic, version='1.0', version_cap=None):
        clients.append(_Recorder(version, version_cap))
        return clients[-1]
    monkeypatch.setattr(rpc, 'get_client', get_client)
    return clients


def _args(function) -> dict:
    """Placeholder arguments for every parameter of a bound method but
    the context."""
    params = list(inspect.signature(function).parameters)[1:]
    return dict.fromkeys(params, 'x')


@pytest.mark.parametrize('method', sorted(CONDUCTOR_METHODS))
def test_each_conductor_method_sends_the_version_it_needs(monkeypatch,
                                                          method):
    clients = _recording(monkeypatch)
    cap = conductor_rpcapi.ConductorAPI.RPC_API_VERSION
    api = conductor_rpcapi.ConductorAPI(object(), version_cap=cap)
    function = getattr(api, method)
    function(None, **_args(function))
    assert clients[0].version == api.BASE_VERSION
    assert clients[0].version_cap == cap
    assert [(m, v) for m, v, _ in clients[0].sent] == [
        (method, CONDUCTOR_METHODS[method])]


@pytest.mark.parametrize('method', sorted(AGENT_METHODS))
def test_each_agent_method_sends_the_version_it_needs(monkeypatch, method):
    clients = _recording(monkeypatch)
    cap = agent_rpcapi.AgentAPI.RPC_API_VERSION
    api = agent_rpcapi.AgentAPI(object(), timeout=7, version_cap=cap)
    function = getattr(api, method)
    function(None, **_args(function))
    assert clients[0].version_cap == cap
    [(sent, version, options)] = clients[0].sent
    assert (sent, version) == (method, AGENT_METHODS[method])
    assert {key: options[key] for key in ('server', 'timeout')} == {
        'server': 'x', 'timeout': 7}


def test_the_caps_come_from_upgrade_levels(conf, monkeypatch):
    clients = _recording(monkeypatch)
    conf.set_override('conductor', '1.0', group='upgrade_levels')
    conf.set_override('agent', '1.0', group='upgrade_levels')
    conductor_rpcapi.ConductorAPI(object())
    agent_rpcapi.AgentAPI(object())
    assert [c.version_cap for c in clients] == ['1.0', '1.0']


def test_no_cap_by_default(conf, monkeypatch):
    clients = _recording(monkeypatch)
    conductor_rpcapi.ConductorAPI(object())
    agent_rpcapi.AgentAPI(object())
    assert [c.version_cap for c in clients] == [None, None]


def test_an_invalid_cap_is_refused(conf):
    with pytest.raises(ValueError):
        conf.set_override('agent', 'newest', group='upgrade_levels')


@pytest.mark.parametrize('cap,version,sent', [
    (None, '1.2', {'utilization': {'0000:3b:00.0': {'gpu_percent': 5.0}}}),
    ('1.2', '1.2', {'utilization': {'0000:3b:00.0': {'gpu_percent': 5.0}}}),
    ('1.1', '1.0', {}),
    ('1.0', '1.0', {})])
def test_report_inventory_sends_utilization_from_1_2(monkeypatch, cap,
                                                     version, sent):
    """A conductor not upgraded yet ([upgrade_levels] conductor = 1.0)
    still gets the agent's reports, without their utilization."""
    clients = _recording(monkeypatch)
    api = conductor_rpcapi.ConductorAPI(object(), version_cap=cap)
    api.report_inventory(None, 'h', 'h.example', [], 'digest', [],
                         utilization={'0000:3b:00.0': {'gpu_percent': 5.0}})
    [(method, sent_version, options)] = clients[0].sent
    assert (method, sent_version) == ('report_inventory', version)
    [kwargs] = options['kwargs']
    assert {k: v for k, v in kwargs.items() if k == 'utilization'} == sent
    assert kwargs['digest'] == 'digest'


def _sent_reports(clients) -> list[tuple[str, dict]]:
    return [(version, kwargs) for (_m, version, options) in clients[0].sent
            for kwargs in options['kwargs']]


@pytest.mark.parametrize('resend', [False, True])
def test_an_acknowledged_report_sends_its_digest_alone(monkeypatch, resend):
    """From 1.3 a tree the conductor answered before goes as its digest;
    the tree follows (at 1.2) only when the conductor asks for it."""
    clients = _recording(monkeypatch)
    api = conductor_rpcapi.ConductorAPI(object())
    answer = {'changed': False, 'synced': True}
    clients[0].options['answers'] = {'report_inventory': {
        'changed': False, 'synced': False, 'resend': True}
        if resend else answer}
    result = api.report_inventory(None, 'h', 'h.example', [{'a': 1}],
                                  'digest', [], utilization={},
                                  acknowledged=True)
    sent = _sent_reports(clients)
    assert sent[0][0] == '1.3'
    assert sent[0][1]['devices'] is None
    assert sent[0][1]['digest'] == 'digest'
    if resend:
        assert [(v, k['devices']) for v, k in sent[1:]] == [
            ('1.2', [{'a': 1}])]
    else:
        assert len(sent) == 1
        assert result == answer


@pytest.mark.parametrize('cap', ['1.2', '1.0'])
def test_below_1_3_every_report_carries_its_tree(monkeypatch, cap):
    clients = _recording(monkeypatch)
    api = conductor_rpcapi.ConductorAPI(object(), version_cap=cap)
    api.report_inventory(None, 'h', 'h.example', [{'a': 1}], 'digest', [],
                         acknowledged=True)
    [(version, kwargs)] = _sent_reports(clients)
    assert version == ('1.2' if cap == '1.2' else '1.0')
    assert kwargs['devices'] == [{'a': 1}]


@pytest.mark.parametrize('method', ['prepare_attach_handle',
                                    'release_attach_handle'])
@pytest.mark.parametrize('cap,preparation,version', [
    (None, 'vgpu_type', '1.3'), ('1.3', 'vgpu_type', '1.3'),
    ('1.2', 'vgpu_type', '1.0'), ('1.0', 'vgpu_type', '1.0'),
    (None, None, '1.0')])
def test_handle_calls_send_the_preparation_from_1_3(monkeypatch, method, cap,
                                                    preparation, version):
    """An agent not upgraded yet ([upgrade_levels] agent below 1.3) gets
    the 1.0 call, without the preparation (it works it out itself)."""
    clients = _recording(monkeypatch)
    api = agent_rpcapi.AgentAPI(object(), version_cap=cap)
    getattr(api, method)(None, 'h', 'nvidia_gpu_driver', 'PCI', {}, 'u',
                         preparation)
    [(sent, sent_version, options)] = clients[0].sent
    assert (sent, sent_version) == (method, version)
    [kwargs] = options['kwargs']
    expected = dict(driver='nvidia_gpu_driver', attach_type='PCI',
                    attach_info={}, handle_uuid='u')
    if version == '1.3':
        expected['preparation'] = preparation
    assert kwargs == expected


def test_program_image_is_capped_below_1_2(monkeypatch):
    clients = _recording(monkeypatch)
    capped = agent_rpcapi.AgentAPI(object(), version_cap='1.1')
    with pytest.raises(rpc.RPCVersionCapped, match='program_image needs '
                       'version 1.2'):
        capped.program_image(None, 'h', 'intel', None, {'id': 'i'})
    assert clients[0].sent == []
    agent_rpcapi.AgentAPI(object(), version_cap='1.2').program_image(
        None, 'h', 'intel', None, {'id': 'i'})
    assert clients[1].sent[0][:2] == ('program_image', '1.2')


def test_deployable_program_is_capped_below_1_1(monkeypatch):
    clients = _recording(monkeypatch)
    capped = conductor_rpcapi.ConductorAPI(object(), version_cap='1.0')
    with pytest.raises(rpc.RPCVersionCapped, match='deployable_program '
                       'needs version 1.1'):
        capped.deployable_program(None, 'd', 'i')
    assert clients[0].sent == []
    conductor_rpcapi.ConductorAPI(object()).deployable_program(None, 'd',
                                                               'i')
    assert clients[1].sent[0][:2] == ('deployable_program', '1.1')


# A method newer than 1.0, over a real oslo.messaging transport --------------

class _Agent:
    """An agent of an older release: serves 1.0, knows no
    ``program_image``."""

    target = messaging.Target(version='1.0')

    def __init__(self):
        self.prepared = threading.Event()

    def prepare_attach_handle(self, context, **kwargs):
        self.prepared.set()

    def program_image(self, context, **kwargs):
        return 'programmed'


_PROGRAM = dict(driver='fake_driver', controlpath=None, image={'id': 'i'})


@pytest.fixture
def agent_on_fake_transport(conf):
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    agent = _Agent()
    server = rpc.get_server(transport, constants.AGENT_TOPIC, 'host1', agent)
    server.start()
    yield transport, agent
    server.stop()
    server.wait()
    transport.cleanup()


def _ctx():
    return cyborg_context.RequestContext(project_id='p')


def test_a_1_0_call_reaches_an_agent_of_this_release(agent_on_fake_transport):
    transport, agent = agent_on_fake_transport
    api = agent_rpcapi.AgentAPI(transport, timeout=5, version_cap='1.0')
    api.prepare_attach_handle(_ctx(), 'host1', None, 'PCI', {}, 'u')
    assert agent.prepared.is_set()


def test_a_capped_newer_method_is_refused_before_it_is_sent(
        agent_on_fake_transport):
    transport, _agent = agent_on_fake_transport
    api = agent_rpcapi.AgentAPI(transport, timeout=5, version_cap='1.0')
    with mock.patch.object(_Agent, 'program_image') as program:
        with pytest.raises(rpc.RPCVersionCapped) as caught:
            api.program_image(_ctx(), 'host1', **_PROGRAM)
    program.assert_not_called()
    assert isinstance(caught.value, messaging.RPCVersionCapError)
    assert str(caught.value) == (
        'program_image needs version 1.2 of the cyborg-agent RPC API, above '
        '[upgrade_levels] agent = 1.0: finish upgrading the agent services, '
        'then raise or unset the cap')


def test_an_uncapped_newer_method_is_refused_by_an_older_agent(
        agent_on_fake_transport):
    transport, _agent = agent_on_fake_transport
    api = agent_rpcapi.AgentAPI(transport, timeout=5)
    with pytest.raises(messaging.UnsupportedVersion):
        api.program_image(_ctx(), 'host1', **_PROGRAM)


def test_the_in_process_transport_sends_every_version():
    transport = rpc.LocalTransport(max_workers=1)
    try:
        server = rpc.get_server(transport, constants.AGENT_TOPIC, 'host1',
                                _Agent())
        server.start()
        api = agent_rpcapi.AgentAPI(transport, version_cap='1.0')
        assert api._prepare('program_image', '1.2', 'host1').call(
            _ctx(), 'program_image', **_PROGRAM) == 'programmed'
    finally:
        transport.cleanup()


@pytest.mark.parametrize('method,version,kwargs', [
    ('program', '1.1', dict(driver='fake_driver', controlpath=None,
                            image_path='/img')),
    ('ping', '1.0', {})])
def test_an_agent_answers_a_retired_method_cleanly(conf, method, version,
                                                   kwargs):
    """``program`` (1.1) and ``ping`` are gone (1.3): a conductor that
    still sends them gets oslo.messaging's NoSuchMethod, the agent goes
    on serving."""
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    agent = agent_manager.AgentManager('host1', None)
    server = rpc.get_server(transport, constants.AGENT_TOPIC, 'host1', agent)
    server.start()
    try:
        client = rpc.get_client(transport, constants.AGENT_TOPIC, version)
        with pytest.raises(messaging.NoSuchMethod):
            client.prepare(server='host1', timeout=5).call(_ctx(), method,
                                                           **kwargs)
        assert not hasattr(agent, method)
        api = agent_rpcapi.AgentAPI(transport, timeout=5)
        with pytest.raises(exception.Invalid, match='not enabled on host1'):
            api.prepare_attach_handle(_ctx(), 'host1', 'fake_driver', 'PCI',
                                      {}, 'u', 'none')
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


@pytest.mark.parametrize('cap, sent', [(None, True), ('1.9', True),
                                       ('1.8', False)])
def test_prepared_handles_from_1_9(monkeypatch, cap, sent):
    """Below 1.9 the agent is told nothing (None): it restores nothing.
    Both calls wait no longer than a report."""
    clients = _recording(monkeypatch)
    api = conductor_rpcapi.ConductorAPI(object(), version_cap=cap)
    clients[0].options['answers'] = {'prepared_handles': [{'uuid': 'h'}]}
    answer = api.prepared_handles(None, 'h')
    if not sent:
        assert answer is None
        assert clients[0].sent == []
        return
    assert answer == [{'uuid': 'h'}]
    api.handles_restored(None, 'h', {'restored': ['h']})
    assert [(m, v, o['timeout']) for m, v, o in clients[0].sent] == [
        ('prepared_handles', '1.9', conductor_rpcapi.REPORT_TIMEOUT),
        ('handles_restored', '1.9', conductor_rpcapi.REPORT_TIMEOUT)]


@pytest.mark.parametrize('cap, sent', [(None, True), ('1.10', True),
                                       ('1.9', False)])
def test_partition_switch_from_1_10(monkeypatch, cap, sent):
    """Below 1.10 the agent is told nothing (None): its drivers switch
    without asking, as before. The call waits no longer than a
    report."""
    clients = _recording(monkeypatch)
    api = conductor_rpcapi.ConductorAPI(object(), version_cap=cap)
    clients[0].options['answers'] = {'partition_switch': {
        'allowed': False, 'serving': ['a']}}
    answer = api.partition_switch(None, 'h', '0000:41:00.0', 'b')
    if not sent:
        assert answer is None
        assert clients[0].sent == []
        return
    assert answer == {'allowed': False, 'serving': ['a']}
    assert [(m, v, o['timeout']) for m, v, o in clients[0].sent] == [
        ('partition_switch', '1.10', conductor_rpcapi.REPORT_TIMEOUT)]


@pytest.mark.parametrize('cap, sent', [(None, True), ('1.4', True),
                                       ('1.3', False)])
def test_bound_devices_from_1_4(monkeypatch, cap, sent):
    """Below 1.4 the agent is told nothing (None): it resets no device."""
    clients = _recording(monkeypatch)
    api = conductor_rpcapi.ConductorAPI(object(), version_cap=cap)
    clients[0].options['answers'] = {'bound_devices': ['0000:3b:00.0']}
    answer = api.bound_devices(None, 'h')
    if sent:
        assert answer == ['0000:3b:00.0']
        assert [(m, v) for m, v, _o in clients[0].sent] == [
            ('bound_devices', '1.4')]
    else:
        assert answer is None
        assert clients[0].sent == []
