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

"""Upstream OpenStack Cyborg as the Cyborg of a real Nova deployment.

:class:`UpstreamCyborg` is a :class:`~nova_services.CyborgPart` that runs
``openstack-cyborg`` (17.0.0) from its own virtualenv
(``.venv-upstream``, made by ``tools/bench/upstream-venv.sh``) on a
database of the given server (MariaDB in the upstream switch test):

* ``cyborg-dbsync upgrade``;
* its API (``cyborg.wsgi.api:application``) under this virtualenv's
  uWSGI (the same Python) with upstream's own paste pipeline, authtoken
  included, and ``[keystone_authtoken]`` on the deployment's Keystone;
* its conductor, with Placement (no auth) and Nova (through Keystone, as
  the deployment's Cyborg service user);
* one agent per compute host, one after the other (upstream's conductor
  handles concurrent first reports badly: two creating the same trait in
  Placement, one fails and its device only comes back with the agent's
  next periodic report), with upstream's fake driver (one FPGA device,
  ``0000:0c:00.0``, one deployable of 16 ``TEST_PCI`` handles) and, on a
  host with a host tree, upstream's NVIDIA GPU driver.

Upstream's NVIDIA driver finds a passthrough GPU with ``lspci -nn -D``
alone (it reads ``/sys`` only for vGPU types and, with ``[gpu_devices]
filter_sriov_vfs``, for VFs; both stay off here), so the host tree's fake
``lspci`` on the agent's PATH is all it needs. It runs ``lspci`` through
upstream's privsep context, whose daemon is started as
``privsep-helper`` of the upstream virtualenv (``[cyborg_sys_admin]
helper_command``), directly when the tests run as root, else in a user
namespace of its own (``unshare --user --map-root-user``) where it may
keep the capabilities it asks for.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

import requests

from tests.functional import nova_services
from tests.functional import servers
from tools.bench import upstream as upstream_bench

VENV = upstream_bench.VENV
# Where upstream's API must be mounted (see start_control).
API_PATH = '/accelerator'
FAKE_DEVICE_ADDRESS = '0000:0c:00.0'
FAKE_ACCELERATORS = 16
FAKE_TRAIT = 'CUSTOM_FAKE_DEVICE'


def require_venv(venv: str = VENV) -> str:
    """The upstream virtualenv's version of openstack-cyborg; fails with
    how to make the virtualenv when it is missing."""
    for script in ('cyborg-api', 'cyborg-conductor', 'cyborg-agent',
                   'cyborg-dbsync', 'privsep-helper'):
        upstream_bench.venv_script(script, venv)
    return upstream_bench.version(venv)


def fake_device_spec() -> dict[str, Any]:
    """Our fake driver's device shaped as upstream's fake driver's: the
    same PCI address, resource class, trait, type and handles (function
    ``n`` of 1..16 at ``0c:(n // 8).(n % 8)``)."""
    return {'address': FAKE_DEVICE_ADDRESS, 'type': 'FPGA',
            'resource_class': 'FPGA', 'traits': [FAKE_TRAIT],
            'accelerators': FAKE_ACCELERATORS, 'handle_type': 'TEST_PCI',
            'vendor': '0xABCD', 'health': 'healthy'}


def _privsep_helper(venv: str, config_file: str) -> str:
    argv = [os.path.join(venv, 'bin', 'privsep-helper'), '--config-file',
            config_file]
    if os.geteuid() != 0:
        argv = [servers.find_binary('unshare', 'util-linux'), '--user',
                '--map-root-user'] + argv
    return ' '.join(argv)


class UpstreamCyborg(nova_services.CyborgPart):
    """Upstream's Cyborg; see the module docstring. ``db_server`` is the
    database server (``create_database``) of its database; ``label``
    tells its database and transport apart from another part's of the
    same deployment."""

    concurrent_agents = False

    def __init__(self, db_server, label: str = 'upstream',
                 venv: str = VENV) -> None:
        super().__init__(label)
        self.db_server = db_server
        self.venv = venv
        self.base: dict[str, dict[str, Any]] = {}
        self.conf = ''

    def configure(self, d: nova_services.RealNova) -> None:
        require_venv(self.venv)
        self.open(self.db_server.create_database(
            '%s_%s' % (self.label.replace('-', '_'), d.suffix)))
        etc = os.path.join(d.directory, 'etc-%s' % self.label)
        os.makedirs(etc, exist_ok=True)
        # Upstream's own pipeline: authtoken in front of the API.
        paste = shutil.copy(os.path.join(self.venv, 'etc', 'cyborg',
                                         'api-paste.ini'), etc)
        self.base = {
            'DEFAULT': {
                'transport_url': d.rabbitmq.create_vhost(
                    '%s-%s-%s' % (d.name, self.label, d.suffix)),
                'heartbeat_interval': 2, 'use_stderr': True},
            'database': {'connection': self.database_url},
            'placement': dict(d.placement_section),
            'nova': d.keystone.ksa_options(d.cyborg_user,
                                           d.service_password),
        }
        config = json.loads(json.dumps(self.base))
        config['DEFAULT']['host'] = '%s-upstream-conductor' % d.name
        config['api'] = {'api_paste_config': paste}
        config['keystone_authtoken'] = d.keystone.authtoken_options(
            d.cyborg_user, d.service_password)
        self.conf = servers.write_config(
            os.path.join(etc, 'cyborg.conf'), config)

    def migrate(self, d: nova_services.RealNova) -> None:
        servers.run_logged(
            [upstream_bench.venv_script('cyborg-dbsync', self.venv),
             '--config-file', self.conf, 'upgrade'],
            os.path.join(d.directory, '%s-dbsync.log' % self.label),
            'upstream cyborg-dbsync upgrade', timeout=300)

    def start_control(self, d: nova_services.RealNova) -> None:
        d.add(nova_services.Process(self.process_name('conductor'), [
            upstream_bench.venv_script('cyborg-conductor', self.venv),
            '--config-file', self.conf], d.directory))
        # Our uWSGI (the same Python) on upstream's virtualenv, with
        # upstream's configuration file as the application's arguments
        # (its WSGI application parses sys.argv), at /accelerator:
        # upstream's links always name that path, as devstack mounts it.
        assert d.cyborg_path == API_PATH, (
            'upstream Cyborg needs its API at %s (real_nova cyborg_path)'
            % API_PATH)
        argv = nova_services.mounted_wsgi_argv(
            'cyborg.wsgi.api:application', d.cyborg_port, API_PATH)
        argv[argv.index('--virtualenv') + 1] = self.venv
        argv += ['--pyargv', '--config-file ' + self.conf]
        d.add(nova_services.Process(self.process_name('api'), argv,
                                    d.directory))

    def wait_control(self, d: nova_services.RealNova) -> None:
        d.processes[self.process_name('conductor')].wait_log(
            'Created RPC server for service cyborg-conductor')
        api = d.processes[self.process_name('api')]
        servers.wait_for(lambda: requests.get(
            d.cyborg_url + '/', timeout=5).status_code == 200,
            nova_services.START_TIMEOUT, 'upstream cyborg-api', api.process,
            api.log, interval=0.25)

    def start_agent(self, d: nova_services.RealNova,
                    spec: nova_services.ComputeSpec
                    ) -> nova_services.Process:
        config = json.loads(json.dumps(self.base))
        config['DEFAULT']['host'] = spec.host
        drivers = ['fake_driver']
        env = {}
        if spec.host_root:
            drivers.append('nvidia_gpu_driver')
            # The tree's fake lspci first: privsep's daemon inherits it.
            env['PATH'] = spec.tools_dir + os.pathsep + os.path.dirname(
                sys.executable) + os.pathsep + os.defpath
        config['agent'] = {'resource_provider_name': spec.host,
                           'enabled_drivers': ','.join(drivers)}
        config_file = os.path.join(d.directory, '%s-agent-%s.conf'
                                   % (self.label, spec.host))
        config['cyborg_sys_admin'] = {
            'helper_command': _privsep_helper(self.venv, config_file)}
        servers.write_config(config_file, config)
        return d.add(nova_services.Process(
            self.process_name('agent-' + spec.host),
            [upstream_bench.venv_script('cyborg-agent', self.venv),
             '--config-file', config_file], d.directory, env=env))

    def deployables(self, spec: nova_services.ComputeSpec) -> int:
        return 1 + spec.gpus
