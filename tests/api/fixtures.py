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

"""Named scenario fixtures of the in-process gabbi tests.

A YAML file names its scenario in its ``fixtures:`` list (one is
enough: each scenario below extends ``APIFixture``, and
``DeviceProfileFixture`` and ``BoundARQFixture`` the one before them);
the values a test needs reach the YAML through environment variables
(``$ENVIRON['NAME']``):

``APIFixture``
    A whole, empty service for this file alone: a fresh SQLite database,
    the real conductor and agent services on the in-process RPC
    transport (the agent's fake driver reports no device), Nova events
    sent to a :class:`~tests.functional.fake_nova.FakeNova` on the
    loopback, Placement the session's embedded one (each file has a host,
    and so a compute node provider, of its own) and the API application
    the tests' requests go to. Sets ``HOSTNAME`` (the agent's host),
    ``INSTANCE_UUID``, ``ALT_INSTANCE_UUID`` and ``UNKNOWN_UUID`` (names
    nothing).
``HostWithDevicesFixture``
    The agent has reported two devices: ``0000:0a:00.0`` (FPGA, trait
    ``CUSTOM_FAKE_PCI``, two PCI attach handles: binding needs no work
    on the host) and ``0000:0b:00.0`` (FPGA, trait ``CUSTOM_FAKE_MDEV``,
    two MDEV handles the agent prepares: binding finishes after the
    ``PATCH``), and ``0000:0c:00.0`` (FPGA, trait ``CUSTOM_FAKE_FAILING``,
    one MDEV handle that fails to prepare: the bind fails after the
    ``PATCH``). Sets ``PCI_RP_UUID``, ``MDEV_RP_UUID`` and
    ``FAILING_RP_UUID``, their providers, as Nova's scheduler finds them:
    in Placement's allocation candidates once the conductor has synced
    the host (and checked to be the devices' deployables).
``DeploymentFixture``
    The agent has reported the device of the functional tests'
    deployments: their YAML files, which name no fixture, run with it.
``DeviceProfileFixture``
    Adds device profiles ``pci-two`` (one group of two PCI accelerators),
    ``mdev-one`` and ``failing-one`` (one group of one accelerator of the
    MDEV and of the failing device).
``BoundARQFixture``
    Adds the ARQ of ``mdev-one``, bound for ``BOUND_INSTANCE_UUID`` on
    ``MDEV_RP_UUID`` through the conductor, as Nova would: ``BOUND_ARQ``.

``GET /fake-nova/events`` answers, instead of the API, the external
events the fake Nova accepted, oldest first: ``{"events": [{"name",
"server_uuid", "tag", "status"}, ...]}``.

The API runs with ``auth_strategy = noauth``: a request without headers
is an admin's, ``X-Project-Id``/``X-Roles`` name another caller, and
``X-Service-Roles: service`` adds Nova's service token.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid

from gabbi import fixture
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import policies
from cyborg.agent import service as agent_service
from cyborg.allinone import embedded_placement
from cyborg.allinone import launch
from cyborg.api import app as api_app
from cyborg.clients import nova as nova_client
from cyborg.clients import placement as placement_client
from cyborg.common import constants
from cyborg.common import rpc
from cyborg.conductor import notifier as nova_notifier
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conductor import service as conductor_service
from cyborg.conductor import sync_worker
from cyborg.conf import CONF
from cyborg.conf import opts as conf_opts
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import models
from cyborg.domain import arq_states
from tests import factories
from tests.functional import conftest as functional_conftest
from tests.functional import fake_nova

# Seconds a fixture waits for the services (the agent's first report, a
# bind to finish).
TIMEOUT = 30
# The embedded Placement of the session (:func:`set_placement`).
_placement: embedded_placement.EmbeddedPlacement | None = None
# The API application and the fake Nova of the running APIFixture.
_app = None
_nova: fake_nova.FakeNova | None = None
# Not the API's: what the fake Nova was sent, for the YAML to check.
NOVA_EVENTS_PATH = '/fake-nova/events'

PCI_ADDRESS = '0000:0a:00.0'
MDEV_ADDRESS = '0000:0b:00.0'
# Its MDEV handle fails to prepare ([fake_driver] prepare_failures).
FAILING_ADDRESS = '0000:0c:00.0'
DEVICES = [
    {'address': PCI_ADDRESS, 'type': 'FPGA', 'resource_class': 'FPGA',
     'traits': ['CUSTOM_FAKE_PCI'], 'accelerators': 2,
     'handle_type': 'PCI', 'health': 'healthy'},
    {'address': MDEV_ADDRESS, 'type': 'FPGA', 'resource_class': 'FPGA',
     'traits': ['CUSTOM_FAKE_MDEV'], 'accelerators': 2,
     'handle_type': 'MDEV', 'health': 'healthy'},
    {'address': FAILING_ADDRESS, 'type': 'FPGA', 'resource_class': 'FPGA',
     'traits': ['CUSTOM_FAKE_FAILING'], 'accelerators': 1,
     'handle_type': 'MDEV', 'health': 'healthy'},
]
PROFILES = {
    'pci-two': [{'resources:FPGA': '2', 'trait:CUSTOM_FAKE_PCI': 'required'}],
    'mdev-one': [{'resources:FPGA': '1',
                  'trait:CUSTOM_FAKE_MDEV': 'required'}],
    'failing-one': [{'resources:FPGA': '1',
                     'trait:CUSTOM_FAKE_FAILING': 'required'}],
    'pgpu-one': [{'resources:PGPU': '1'}],
    'not-pci-one': [{'resources:FPGA': '1',
                     'trait:CUSTOM_FAKE_PCI': 'forbidden'}],
}


def set_placement(placement) -> None:
    """The embedded Placement the fixtures use (one per process)."""
    global _placement
    _placement = placement


def setup_app(environ, start_response):
    """The WSGI application gabbi sends every request to: the running
    APIFixture's (gabbi builds its transports before fixtures start),
    but for :data:`NOVA_EVENTS_PATH`."""
    if _app is None:
        raise RuntimeError('no APIFixture is running')
    if environ.get('PATH_INFO') == NOVA_EVENTS_PATH:
        return _nova_events(environ, start_response)
    return _app(environ, start_response)


def _nova_events(environ, start_response):
    """``GET /fake-nova/events``: the external events the fake Nova
    accepted, oldest first (name, server_uuid, tag, status)."""
    events = [{key: event[key] for key in ('name', 'server_uuid', 'tag',
                                           'status')}
              for event in _nova.accepted()] if _nova else []
    body = json.dumps({'events': events}).encode()
    start_response('200 OK', [('Content-Type', 'application/json'),
                              ('Content-Length', str(len(body)))])
    return [body]


def intercept():
    """gabbi's ``intercept``: a factory of the WSGI application."""
    return setup_app


def _write_config(directory: str, host: str, nova_url: str,
                  devices_file: str) -> str:
    sections = {
        'DEFAULT': {'host': host, 'state_path': directory,
                    'transport_url': constants.INPROC_TRANSPORT_URL,
                    'heartbeat_interval': 60, 'periodic_interval': 1},
        'database': {'connection': 'sqlite:///%s'
                     % os.path.join(directory, 'cyborg.sqlite')},
        'api': {'auth_strategy': 'noauth'},
        'agent': {'resource_provider_name': host,
                  'discovery_interval': 3600,
                  'enabled_drivers': 'fake_driver'},
        'fake_driver': {'devices_file': devices_file,
                        'prepare_delay': 1.0,
                        'prepare_failures': FAILING_ADDRESS},
        # service_type: CONF.reset() (after a unit test) drops the
        # default cyborg.conf.nova sets once.
        'nova': {'auth_type': 'admin_token', 'endpoint': nova_url,
                 'service_type': 'compute',
                 'token': 'admin', 'endpoint_override': nova_url,
                 'timeout': 5, 'retry_interval': 0.1},
    }
    path = os.path.join(directory, 'cyborg.conf')
    with open(path, 'w') as f:
        for name, options in sections.items():
            f.write('[%s]\n' % name)
            f.writelines('%s = %s\n' % item for item in options.items())
    return path


def _parse_conf(config_file: str | None) -> None:
    conf_opts.set_lib_defaults()
    rpc.register_opts(CONF)
    CONF([], project='cyborg',
         default_config_files=[config_file] if config_file else [])


class APIFixture(fixture.GabbiFixture):
    """An empty service of its own for one YAML file (see the module).

    A scenario subclasses it: ``devices`` for what the agent reports,
    :meth:`populate` for rows and requests made before the first test,
    :meth:`export` for the values the YAML reads.
    """

    devices: list[dict] = []

    def start_fixture(self):
        """Start everything; what started is stopped again if a step
        fails (gabbi stops only fixtures that started)."""
        if _placement is None:
            raise RuntimeError('set_placement() was not called')
        self.directory = tempfile.mkdtemp(prefix='cyborg-gabbi-')
        self.services = []
        self.transport = None
        self.nova = None
        self._database = False
        self._exported: list[str] = []
        try:
            self._start()
            self.populate()
        except BaseException:
            self.stop_fixture()
            raise

    def _start(self) -> None:
        global _app, _nova
        self.nova = _nova = fake_nova.FakeNova().start()
        self.host = 'gabbi-%s' % uuid.uuid4().hex[:12]
        devices_file = os.path.join(self.directory, 'devices.json')
        with open(devices_file, 'w') as f:
            json.dump(self.devices, f)
        _parse_conf(_write_config(self.directory, self.host, self.nova.url,
                                  devices_file))
        db_api.configure(CONF)
        self._database = True
        migration.upgrade()
        self.compute_rp_uuid = embedded_placement.ensure_compute_node(
            _placement.client(), self.host)
        self._start_services()
        _app = api_app.setup_app(CONF, self.transport, policies.Authorizer(
            policies.get_enforcer(CONF)))
        self.context = cyborg_context.get_admin_context()
        self.export(HOSTNAME=self.host, INSTANCE_UUID=str(uuid.uuid4()),
                    ALT_INSTANCE_UUID=str(uuid.uuid4()),
                    UNKNOWN_UUID=str(uuid.uuid4()))

    def populate(self) -> None:
        """What a scenario adds before the first test."""

    def export(self, **values: str) -> None:
        """Environment variables for the YAML (``$ENVIRON['NAME']``),
        removed when the fixture stops."""
        os.environ.update(values)
        self._exported.extend(values)

    def _start_services(self) -> None:
        """The conductor and the agent, as the all-in-one starts them;
        returns once the agent's first report is in."""
        self.transport = rpc.get_transport(CONF)
        notifier = nova_notifier.Notifier(
            CONF.host, CONF, lambda: nova_client.client_from_conf(CONF))
        placement_url = _placement.url
        services = [
            conductor_service.create(
                CONF, self.transport,
                lambda: placement_client.PlacementClient.for_endpoint(
                    placement_url,
                    roles=launch.CONDUCTOR_PLACEMENT_ROLES),
                notifier=notifier),
            agent_service.create(CONF, self.transport),
        ]
        for svc in services:
            svc.start()
            self.services.append(svc)
        if not self.services[-1].wait_first_runs(TIMEOUT):
            raise RuntimeError('the agent did not report within %d s'
                               % TIMEOUT)
        # The conductor syncs Placement after it answered the report.
        if not sync_worker.wait_synced(cyborg_context.get_admin_context(),
                                       CONF.host, TIMEOUT):
            raise RuntimeError('Placement was not synced within %d s'
                               % TIMEOUT)

    def stop_fixture(self):
        global _app, _nova
        _app = _nova = None
        try:
            for svc in reversed(self.services):
                svc.stop(TIMEOUT)
            if self.transport is not None:
                rpc.cleanup(self.transport)
            if self._database:
                db_api.get_engine().dispose()
        finally:
            if self.nova is not None:
                self.nova.stop()
            for name in self._exported:
                os.environ.pop(name, None)
            _parse_conf(None)
            shutil.rmtree(self.directory, ignore_errors=True)


class HostWithDevicesFixture(APIFixture):
    """The agent has reported :data:`DEVICES` (see the module)."""

    devices = DEVICES

    def populate(self) -> None:
        super().populate()
        self.export(
            PCI_RP_UUID=self._candidate(PCI_ADDRESS, 'CUSTOM_FAKE_PCI'),
            MDEV_RP_UUID=self._candidate(MDEV_ADDRESS, 'CUSTOM_FAKE_MDEV'),
            FAILING_RP_UUID=self._candidate(FAILING_ADDRESS,
                                            'CUSTOM_FAKE_FAILING'))

    def _candidate(self, address: str, trait: str) -> str:
        """The provider Placement offers for one FPGA with ``trait`` on
        this host, as Nova's scheduler gets it, once the conductor has
        synced the host; it must be the deployable of ``address``."""
        client = _placement.client()
        path = ('/allocation_candidates?resources=FPGA:1&required=%s'
                '&in_tree=%s' % (trait, self.compute_rp_uuid))
        deadline = time.monotonic() + TIMEOUT
        while True:
            candidates = client.request('GET', path, microversion='1.31'
                                        ).json()['allocation_requests']
            if candidates:
                break
            if time.monotonic() > deadline:
                raise RuntimeError('Placement offers no %s on %s within '
                                   '%d s' % (trait, self.host, TIMEOUT))
            time.sleep(0.1)
        [[rp_uuid]] = [list(c['allocations']) for c in candidates]
        if rp_uuid != self._rp_uuid(address):
            raise RuntimeError('Placement offers %s for %s, not its '
                               'deployable' % (rp_uuid, address))
        return rp_uuid

    @staticmethod
    def _rp_uuid(address: str) -> str:
        query = (sa.select(models.Deployable.rp_uuid)
                 .join(models.Device,
                       models.Device.id == models.Deployable.device_id)
                 .where(models.Device.address == address))
        with db_api.get_engine().connect() as connection:
            return connection.execute(query).scalar_one()


class DeploymentFixture(APIFixture):
    """The agent has reported the device of the functional tests'
    deployments (one FPGA, four TEST_PCI handles, trait
    ``CUSTOM_FAKE_DEVICE``)."""

    devices = functional_conftest.DEFAULT_FAKE_DEVICES


class DeviceProfileFixture(HostWithDevicesFixture):
    """Adds the device profiles of :data:`PROFILES`."""

    def populate(self) -> None:
        super().populate()
        for name, groups in PROFILES.items():
            factories.create_test_device_profile(self.context, name=name,
                                                 groups=groups)


class BoundARQFixture(DeviceProfileFixture):
    """Adds an ARQ of ``mdev-one`` bound as Nova binds it (``BOUND_ARQ``,
    for ``BOUND_INSTANCE_UUID`` on ``MDEV_RP_UUID``)."""

    def populate(self) -> None:
        super().populate()
        conductor = conductor_rpcapi.ConductorAPI(self.transport)
        service = cyborg_context.RequestContext(
            is_admin=True, roles=['admin'], service_roles=['service'],
            project_id='gabbi', overwrite=False)
        [arq] = conductor.arq_create(service, 'mdev-one')
        instance = str(uuid.uuid4())
        conductor.arq_bind(service, {arq['uuid']: {
            'hostname': self.host, 'instance_uuid': instance,
            'device_rp_uuid': os.environ['MDEV_RP_UUID']}})
        self._wait_bound(arq['uuid'])
        self.export(BOUND_ARQ=arq['uuid'], BOUND_INSTANCE_UUID=instance)

    @staticmethod
    def _wait_bound(arq_uuid: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with db_api.get_engine().connect() as connection:
                state = connection.execute(
                    sa.select(models.ExtendedAcceleratorRequest.state)
                    .where(models.ExtendedAcceleratorRequest.uuid
                           == arq_uuid)).scalar_one()
            if state == arq_states.BOUND:
                return
            time.sleep(0.05)
        raise RuntimeError('ARQ %s was not bound within %d s'
                           % (arq_uuid, TIMEOUT))
