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

"""A deployment to play Nova against, shared by test_nova_flow.py and
test_arq_faults.py.

:func:`deployment` starts, on a database server of the session (its
PostgreSQL or its MariaDB: conftest.py's ``db_server``), its RabbitMQ and
Placement (see conftest.py):

* a fresh database, upgraded with ``cyborg-dbsync upgrade`` (on
  PostgreSQL restored from the run's dump of it:
  :func:`servers.upgrade_cyborg_database`);
* a private RabbitMQ virtual host (so the conductors never share RPC
  queues with another deployment of the same session);
* two ``cyborg-conductor`` processes (hosts ``<name>-cond-0`` and
  ``<name>-cond-1``), small ``[conductor] bind_timeout``, the Nova client
  pointed at a :class:`FakeNova` with ``auth_type = admin_token``;
* one ``cyborg-api`` (noauth);
* one ``cyborg-agent`` per :class:`AgentSpec`, fake driver with a devices
  file (PCI attach handles, a trait unique to the deployment), under a
  compute node provider created beforehand with
  ``embedded_placement.ensure_compute_node``.

It returns only once Placement has a provider with inventory for every
device of every agent. Test modules wrap it in a module-scoped fixture.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
import contextlib
import dataclasses
import json
import os
import signal
import time
from typing import Any
import uuid as uuid_lib

import requests
import sqlalchemy as sa

from cyborg.allinone import embedded_placement
from tests.functional import servers
from tests.functional.fake_nova import FakeNova

START_TIMEOUT = 90
BIND_TIMEOUT = 15
AGENT_TIMEOUT = 3
PLACEMENT_VERSION = 'placement 1.36'
# What keystonemiddleware puts in the environment for a request carrying
# Nova's service token; in noauth mode the client sends it itself.
SERVICE = {'X-Service-Roles': 'service'}
RESOLVED = ('Bound', 'BindFailed')


@dataclasses.dataclass
class AgentSpec:
    """One agent host: ``devices`` devices with ``handles`` attach handles
    of ``handle_type``; ``fake_driver``: more of its options."""
    name: str
    devices: int = 1
    handles: int = 8
    bus_base: int = 0x40
    handle_type: str = 'PCI'
    fake_driver: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Device:
    host: str
    address: str
    rp_uuid: str
    handles: int


class NovaFlowDeployment:
    def __init__(self, name: str, directory: str, url: str, trait: str,
                 placement, nova: FakeNova, db_url: str):
        self.name = name
        self.directory = directory
        self.url = url
        self.trait = trait
        self.placement = placement
        self.nova = nova
        self.db_url = db_url
        self.engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
        self.conductors: list[servers.CyborgProcess] = []
        self.conductor_configs: list[dict] = []
        self.api: servers.CyborgProcess | None = None
        self.agents: list[servers.CyborgProcess] = []
        self.devices: dict[str, list[Device]] = {}
        #: The port of each conductor's and agent's /metrics, by process
        #: name (conductor-0, agent-0, ...).
        self.metrics_ports: dict[str, int] = {}

    # Processes ----------------------------------------------------------

    @property
    def processes(self) -> list[servers.CyborgProcess]:
        return ([c for c in self.conductors if c is not None]
                + ([self.api] if self.api else []) + self.agents)

    def logs(self, lines: int = 60) -> str:
        return '\n'.join('==== %s ====\n%s' % (p.name, servers.tail(p.log,
                                                                    lines))
                         for p in self.processes)

    def start_conductor(self, index: int) -> servers.CyborgProcess:
        """(Re)start conductor ``index`` with its config; waits until it
        serves RPC. Its log is appended to."""
        process = servers.CyborgProcess(
            'cyborg-conductor', self.conductor_configs[index],
            self.directory, name='conductor-%d' % index)
        marker = len(_read(process.log))
        process.start()
        self.conductors[index] = process

        def started():
            return 'Started cyborg-conductor' in _read(process.log)[marker:]
        servers.wait_for(started, START_TIMEOUT, process.name,
                         process.process, process.log)
        return process

    def kill_conductor(self, index: int,
                       sig: int = signal.SIGKILL) -> None:
        process = self.conductors[index]
        servers.kill_group(process.process, sig)

    def restart_conductor(self, index: int,
                          sig: int = signal.SIGKILL) -> None:
        self.kill_conductor(index, sig)
        self.start_conductor(index)

    def check_alive(self) -> None:
        for process in self.processes:
            assert process.running(), '%s died:\n%s' % (
                process.name, servers.tail(process.log))

    def stop(self) -> None:
        errors = []
        # Every process shuts down at once; then each is waited for (and
        # killed if it takes too long).
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.stop()
            except Exception as e:  # pragma: no cover - best effort
                errors.append(e)
        self.engine.dispose()
        if errors:
            raise errors[0]

    # HTTP -----------------------------------------------------------------

    def request(self, method: str, path: str, service: bool = False,
                project: str | None = None, roles: str | None = None,
                **kwargs) -> requests.Response:
        headers = dict(kwargs.pop('headers', {}))
        if service:
            headers.update(SERVICE)
        if project is not None:
            headers['X-Project-Id'] = project
        if roles is not None:
            headers['X-Roles'] = roles
        kwargs.setdefault('timeout', 60)
        return requests.request(method, self.url + path, headers=headers,
                                **kwargs)

    def create_profile(self, groups: list[dict[str, str]],
                       name: str | None = None) -> str:
        name = name or 'nf-%s' % uuid_lib.uuid4().hex[:10]
        response = self.request('POST', '/v2/device_profiles',
                                json=[{'name': name, 'groups': groups}])
        assert response.status_code == 201, response.text
        return name

    def create_arqs(self, profile: str, **kwargs) -> list[dict[str, Any]]:
        response = self.request('POST', '/v2/accelerator_requests',
                                json={'device_profile_name': profile},
                                **kwargs)
        assert response.status_code == 201, response.text
        return response.json()['arqs']

    def bind(self, bindings: dict[str, dict[str, str]],
             **kwargs) -> requests.Response:
        """PATCH /v2/accelerator_requests with Nova's add ops."""
        body = {arq: [{'op': 'add', 'path': '/' + field, 'value': value}
                      for field, value in binding.items()]
                for arq, binding in bindings.items()}
        kwargs.setdefault('service', True)
        return self.request('PATCH', '/v2/accelerator_requests', json=body,
                            **kwargs)

    def arqs(self, **params) -> list[dict[str, Any]]:
        response = self.request('GET', '/v2/accelerator_requests',
                                params=params)
        assert response.status_code == 200, response.text
        return response.json()['arqs']

    def wait_resolved(self, uuids: Sequence[str], timeout: float = 60.0
                      ) -> dict[str, dict[str, Any]]:
        """Poll until every ARQ of ``uuids`` is Bound or BindFailed."""
        wanted = set(uuids)
        last: dict[str, dict[str, Any]] = {}

        def resolved():
            last.clear()
            last.update({a['uuid']: a for a in self.arqs()
                         if a['uuid'] in wanted})
            return (set(last) == wanted and
                    all(a['state'] in RESOLVED for a in last.values()))
        try:
            servers.wait_for(resolved, timeout, 'ARQs resolved',
                             interval=0.25)
        except servers.ServerError:
            states: dict[str, int] = {}
            for arq in last.values():
                states[arq['state']] = states.get(arq['state'], 0) + 1
            raise AssertionError('ARQs not resolved after %ss: %s (of %d)\n%s'
                                 % (timeout, states, len(wanted),
                                    self.logs(30)))
        return dict(last)

    def delete_all_arqs(self) -> None:
        uuids = [arq['uuid'] for arq in self.arqs()]
        for start in range(0, len(uuids), 50):
            response = self.request(
                'DELETE', '/v2/accelerator_requests', service=True,
                params={'arqs': ','.join(uuids[start:start + 50])})
            assert response.status_code == 204, response.text

    # Placement ------------------------------------------------------------

    def allocation_candidates(self, groups: list[dict[str, str]]
                              ) -> list[dict[str, list[str]]]:
        """``mappings`` of Placement's allocation candidates for the DP
        ``groups``, keyed by Nova's requester ids (``device_profile_<i>``).
        """
        params: dict[str, str] = {'group_policy': 'none', 'limit': '50'}
        suffixes = {}
        for index, group in enumerate(groups):
            suffix = '_dp%d' % index
            suffixes[suffix] = 'device_profile_%d' % index
            resources = ','.join('%s:%s' % (key.split(':', 1)[1], value)
                                 for key, value in group.items()
                                 if key.startswith('resources:'))
            required = ','.join(key.split(':', 1)[1]
                                for key, value in group.items()
                                if key.startswith('trait:')
                                and value == 'required')
            params['resources' + suffix] = resources
            if required:
                params['required' + suffix] = required
        response = requests.get(
            self.placement.url + '/allocation_candidates', params=params,
            headers={'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': PLACEMENT_VERSION},
            timeout=10)
        assert response.status_code == 200, response.text
        return [{suffixes[suffix]: rps
                 for suffix, rps in request['mappings'].items()}
                for request in response.json()['allocation_requests']]

    # Database ---------------------------------------------------------------

    def db_rows(self, sql: str, **params) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.text(sql), params))

    def handle_stats(self) -> dict[str, Any]:
        """What the DB says about attach handles and ARQs."""
        in_use = self.db_rows(
            'SELECT count(*) FROM attach_handles WHERE in_use')[0][0]
        states = dict(self.db_rows(
            'SELECT state, count(*) FROM extended_accelerator_requests '
            'GROUP BY state'))
        holders = self.db_rows(
            'SELECT attach_handle_id, count(*) FROM '
            'extended_accelerator_requests WHERE attach_handle_id IS NOT '
            'NULL GROUP BY attach_handle_id')
        bound_without = self.db_rows(
            "SELECT count(*) FROM extended_accelerator_requests WHERE "
            "state = 'Bound' AND attach_handle_id IS NULL")[0][0]
        held_not_in_use = self.db_rows(
            'SELECT count(*) FROM extended_accelerator_requests a JOIN '
            'attach_handles h ON h.id = a.attach_handle_id WHERE NOT '
            'h.in_use')[0][0]
        return {'in_use': in_use, 'states': states,
                'held': sum(n for _h, n in holders),
                'shared': [h for h, n in holders if n > 1],
                'bound_without_handle': bound_without,
                'held_not_in_use': held_not_in_use}


def start_bind(api: str, group: dict[str, str], host: str, rp_uuid: str,
               timeout: float = 30) -> tuple[str, str]:
    """Nova's flow up to the bind, over HTTP against the v2 API at
    ``api``: a new profile of one ``group``, its one ARQ, and a bind of
    that ARQ on provider ``rp_uuid`` of ``host`` for a new instance
    (202). The ARQ's uuid and the instance's."""
    name = 'flow-%s' % uuid_lib.uuid4().hex[:8]
    response = requests.post(api + '/device_profiles', timeout=timeout,
                             json=[{'name': name, 'groups': [group]}])
    assert response.status_code == 201, response.text
    response = requests.post(api + '/accelerator_requests', timeout=timeout,
                             json={'device_profile_name': name})
    assert response.status_code == 201, response.text
    (arq,) = response.json()['arqs']
    instance = str(uuid_lib.uuid4())
    response = requests.patch(
        api + '/accelerator_requests', headers=SERVICE, timeout=timeout,
        json={arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]})
    assert response.status_code == 202, response.text
    return arq['uuid'], instance


def _read(path: str) -> str:
    try:
        with open(path, errors='replace') as f:
            return f.read()
    except OSError:
        return ''


def placement_config(url: str) -> dict[str, str]:
    return {'auth_type': 'admin_token', 'endpoint': url, 'token': 'admin',
            'endpoint_override': url}


def _wait_for_providers(deployment: NovaFlowDeployment,
                        agents: Sequence[AgentSpec]) -> None:
    """Until the API shows every device with its provider uuid and
    Placement has those providers with their inventory (none: a test
    that starts its own agents waits for them itself)."""
    if not agents:
        return
    expected = sum(agent.devices for agent in agents)

    def ready():
        rows = deployment.db_rows(
            'SELECT d.hostname, dep.rp_uuid, dep.name, '
            'dep.num_accelerators FROM deployables dep JOIN devices d ON '
            'd.id = dep.device_id WHERE dep.rp_uuid IS NOT NULL')
        if len(rows) < expected:
            return False
        candidates = deployment.allocation_candidates(
            [{'resources:FPGA': '1',
              'trait:' + deployment.trait: 'required'}])
        rps = {rp for c in candidates for rp in c['device_profile_0']}
        if len(rps) != expected:
            return False
        hosts: dict[str, list[Device]] = {}
        for host, rp_uuid, name, handles in rows:
            if rp_uuid in rps:
                hosts.setdefault(host, []).append(
                    Device(host, name, rp_uuid, handles))
        deployment.devices = hosts
        return all(len(hosts.get(a.name, ())) == a.devices for a in agents)

    servers.wait_for(ready, START_TIMEOUT, 'the providers of %s in Placement'
                     % deployment.name, interval=0.5)


def database_kind(server) -> str:
    """``'mariadb'`` or ``'postgresql'``: which kind of server
    ``server`` (a :class:`servers.MariaDBServer` or
    :class:`servers.PostgreSQLServer`) is."""
    return ('mariadb' if isinstance(server, servers.MariaDBServer)
            else 'postgresql')


@contextlib.contextmanager
def deployment(name: str, db_server, rabbitmq, placement, work_dir: str,
               agents: Sequence[AgentSpec], conductor_workers: int = 16,
               nova_options: dict | None = None,
               conductor_options: dict | None = None,
               conductor_sections: Callable[[str], dict] | None = None,
               sections: dict[str, dict] | None = None,
               api_options: dict | None = None
               ) -> Iterator[NovaFlowDeployment]:
    """Start the deployment described in the module docstring, with
    its database on ``db_server`` (PostgreSQL or MariaDB);
    ``conductor_options`` replace the conductors' ``[conductor]``
    defaults of this module; ``conductor_sections`` gives more sections
    of the conductors' configuration, called with their RPC transport
    URL. ``rabbitmq`` is any broker with ``create_vhost`` (a
    :class:`servers.RabbitMQServer` or a cluster); ``sections`` are more
    sections of every process's configuration (e.g.
    ``oslo_messaging_rabbit``), ``api_options`` more ``[api]`` options.
    """
    directory = os.path.join(work_dir, name)
    os.makedirs(directory)
    suffix = uuid_lib.uuid4().hex[:8]
    trait = 'CUSTOM_NOVA_FLOW_%s' % suffix.upper()
    db_name = '%s_%s' % (name.replace('-', '_'), suffix)
    db_url = db_server.create_database(db_name)
    transport = rabbitmq.create_vhost('%s-%s' % (name, suffix))
    port = servers.free_port()
    url = 'http://%s:%d' % (servers.LOOPBACK, port)
    with FakeNova() as nova:
        base = {
            'DEFAULT': {'transport_url': transport, 'state_path': directory,
                        'heartbeat_interval': 2, 'periodic_interval': 2},
            'database': {'connection': db_url},
            'placement': placement_config(placement.url),
        }
        for section, options in (sections or {}).items():
            base.setdefault(section, {}).update(options)
        api_config = json.loads(json.dumps(base))
        api_config['DEFAULT']['host'] = '%s-api' % name
        api_config['api'] = {'auth_strategy': 'noauth',
                             'host_ip': servers.LOOPBACK, 'port': port,
                             **(api_options or {})}
        config_file = servers.write_config(
            os.path.join(directory, 'api.conf'), api_config)
        servers.upgrade_cyborg_database(config_file, db_server)
        flow = NovaFlowDeployment(name, directory, url, trait, placement,
                                  nova, db_url)
        nova_config = {'auth_type': 'admin_token', 'endpoint': nova.url,
                       'token': 'admin', 'endpoint_override': nova.url,
                       'timeout': 3, 'claim_timeout': 10,
                       'poll_interval': 0.5, 'retry_interval': 0.2,
                       'retry_max_interval': 1}
        nova_config.update(nova_options or {})
        for index in range(2):
            config = json.loads(json.dumps(base))
            config['DEFAULT']['host'] = '%s-cond-%d' % (name, index)
            config['conductor'] = {'bind_timeout': BIND_TIMEOUT,
                                   'agent_timeout': AGENT_TIMEOUT,
                                   'workers': conductor_workers,
                                   **(conductor_options or {})}
            config['nova'] = nova_config
            config['metrics'] = _metrics_options(
                flow, 'conductor-%d' % index, 'conductor_port')
            if conductor_sections is not None:
                config.update(conductor_sections(transport))
            flow.conductor_configs.append(config)
            flow.conductors.append(None)  # type: ignore[arg-type]
        try:
            for index in range(2):
                flow.start_conductor(index)
            flow.api = servers.CyborgProcess('cyborg-api', None, directory,
                                             args=['--config-file',
                                                   config_file]).start()
            flow.api.wait_http(url + '/', START_TIMEOUT)
            for number, agent in enumerate(agents):
                embedded_placement.ensure_compute_node(placement.client(),
                                                       agent.name)
                devices_file = os.path.join(directory,
                                            '%s-devices.json' % agent.name)
                with open(devices_file, 'w') as f:
                    json.dump([{
                        'address': '0000:%02x:00.0' % (agent.bus_base + i),
                        'type': 'FPGA', 'resource_class': 'FPGA',
                        'traits': [trait], 'accelerators': agent.handles,
                        'handle_type': agent.handle_type,
                        'health': 'healthy'}
                        for i in range(agent.devices)], f)
                agent_config = json.loads(json.dumps(base))
                agent_config['DEFAULT']['host'] = agent.name
                agent_config['agent'] = {
                    'resource_provider_name': agent.name,
                    'discovery_interval': 2,
                    'enabled_drivers': 'fake_driver'}
                agent_config['fake_driver'] = dict(
                    agent.fake_driver, devices_file=devices_file,
                    handle_type=agent.handle_type)
                agent_config['metrics'] = _metrics_options(
                    flow, 'agent-%d' % number, 'agent_port')
                flow.agents.append(servers.CyborgProcess(
                    'cyborg-agent', agent_config, directory,
                    name='agent-%d' % number).start())
            _wait_for_providers(flow, agents)
            yield flow
        finally:
            try:
                flow.stop()
            finally:
                db_server.drop_database(db_name)


def _metrics_options(flow: NovaFlowDeployment, name: str,
                     port_option: str) -> dict[str, Any]:
    """``[metrics]`` of process ``name``: /metrics on a port of its own
    (several conductors and agents share the loopback address)."""
    flow.metrics_ports[name] = servers.free_port()
    return {'listen_host': servers.LOOPBACK,
            port_option: flow.metrics_ports[name]}


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError('%s: not after %ss' % (what, timeout))
