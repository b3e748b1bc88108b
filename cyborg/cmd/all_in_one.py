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

"""cyborg-all-in-one: API, conductor, agent and Placement in one process.

Runs on embedded defaults: SQLite in the state directory, an in-process
RPC transport, ``noauth``, and a real Placement service (the
openstack-placement package) holding a compute node provider for this
host, as nova-compute would. Everything else comes from --config-file.

--host-root DIR sets ``[agent] host_root``: the drivers read their
hardware under DIR. --demo-hardware builds a demo host (two NVIDIA GPUs,
a QAT with 4 VFs, a NIC with 4 VFs on physnet1, an Intel FPGA, fake
vendor commands) in the state directory, enables the matching drivers and
runs a stand-in for the kernel that makes the vGPUs the driver creates
appear; unless told otherwise, it serves the demo FPGA's bitstreams (gzip,
aes) as --bitstream-dir would.

FPGA bitstreams come from Glance: --glance-url URL points ``[glance]`` at
a Glance reached without keystone; --bitstream-dir DIR serves the images
described in DIR from a local, read-only Glance stand-in on loopback
(:mod:`cyborg.common.local_images`), so that programming runs the same
code (lookups, verified downloads) as against a real Glance.
"""

import argparse
import os
import sys
import time

from oslo_log import log as logging

from cyborg.agent import discovery
from cyborg.accelerator.drivers.utils import demo_host
from cyborg.agent import service as agent_service
from cyborg.api import app as api_app
from cyborg.common import config
from cyborg.clients import glance
from cyborg.clients import nova as nova_client
from cyborg.clients import placement as placement_client
from cyborg.common import constants
from cyborg.common import embedded_placement
from cyborg.common import exception
from cyborg.common import local_images
from cyborg.common import rpc
from cyborg.common import signals
from cyborg.common import wsgi_server
from cyborg.conductor import notifier as nova_notifier
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF
from cyborg.conf import glance as glance_conf
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg import policies

LOG = logging.getLogger(__name__)

# The roles of the conductor in the embedded Placement: those keystone
# gives a service user (the service role lets it set the inventories of
# many providers with one POST /reshaper).
CONDUCTOR_PLACEMENT_ROLES = ('admin', 'service')

# Seconds the all-in-one waits for the agent's first inventory report
# before it opens the API: a client that starts on the ready line then
# finds the host's devices already listed.
FIRST_REPORT_TIMEOUT = 60

# Where --demo-hardware builds its host, and writes the bitstreams of its
# FPGA, under the state directory.
DEMO_DIR = 'demo-host'
DEMO_BITSTREAMS_DIR = 'demo-bitstreams'

DEFAULT_STATE_DIR = os.path.join(os.path.expanduser('~'), '.local', 'share',
                                 'cyborg')

USAGE = """\
Cyborg all-in-one is running.

  API endpoint:  {endpoint}
  Placement:     {placement} (X-Auth-Token: admin)
  State:         {state_dir}

Use the OpenStack client against it (no Keystone; you act as an admin):

  export OS_AUTH_TYPE=none OS_ENDPOINT={endpoint}
  openstack accelerator device list
{examples}
Press Ctrl-C to stop.
"""

FAKE_EXAMPLES = """\
  openstack accelerator device profile create my-fpga \\
      '[{{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}}]'
  openstack accelerator device profile list

Ask Placement where such a profile fits:

  curl -s -H 'X-Auth-Token: admin' \\
      -H 'OpenStack-API-Version: placement 1.26' \\
      '{placement}/allocation_candidates?resources=FPGA:1&required={trait}'
"""

DEMO_EXAMPLES = """\
  openstack accelerator device profile create demo-qat \\
      '[{{"resources:CUSTOM_QAT": "1"}}]'

The demo hardware (fake, in {root}; a thread stands in for the
kernel and makes the vGPUs the driver creates), and what a device profile
group asks to get each:

  {pgpu}  NVIDIA Tesla T4, passthrough    resources:PGPU=1
  {vgpu}  NVIDIA Tesla T4, vGPUs          resources:VGPU=1,
                {vtype}                   trait:{vtrait}=required
  {qat}  Intel QAT 4xxx, 4 VFs           resources:CUSTOM_QAT=1
  {nic}  Intel E810, 4 VFs               resources:CUSTOM_NIC=1,
                on {physnet}                 trait:{ptrait}=required
  {fpga}  Intel FPGA N6000 (DFL)         resources:FPGA=1,
                programmed at bind with      accel:function_name=gzip
                the bitstream of a function  (or aes)

Ask Placement where a QAT VF fits:

  curl -s -H 'X-Auth-Token: admin' \\
      -H 'OpenStack-API-Version: placement 1.26' \\
      '{placement}/allocation_candidates?resources=CUSTOM_QAT:1'
"""

def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog='cyborg-all-in-one', description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--host', default='127.0.0.1',
                        help='Address the API listens on (127.0.0.1).')
    parser.add_argument('--port', type=int, default=6666,
                        help='Port the API listens on (6666).')
    parser.add_argument('--placement-port', type=int, default=8778,
                        help='Port of the embedded Placement (8778; 0 '
                             'picks a free one).')
    parser.add_argument('--state-dir', default=DEFAULT_STATE_DIR,
                        help='Directory for the database and other state '
                             '(%(default)s).')
    hardware = parser.add_mutually_exclusive_group()
    hardware.add_argument('--host-root',
                          help='Root under which the drivers read the '
                               'host\'s sys, proc and dev trees ([agent] '
                               'host_root).')
    bitstreams = parser.add_mutually_exclusive_group()
    bitstreams.add_argument('--glance-url', metavar='URL',
                            help='Glance to find FPGA bitstreams in, '
                                 'without keystone (sets [glance] '
                                 'endpoint_override; the token sent is '
                                 '"admin").')
    bitstreams.add_argument('--bitstream-dir', metavar='DIR',
                            help='Serve the FPGA bitstream images described '
                                 'in DIR (<name>.json files, see the '
                                 'admin guide) as a local Glance on '
                                 'loopback, and find bitstreams there.')
    hardware.add_argument('--demo-hardware', action='store_true',
                          help='Build a demo host (GPUs, QAT, NIC, FPGA) '
                               'in the state directory and report it with '
                               'the real drivers.')
    return parser.parse_known_args(argv)


def _set_demo_hardware(state_dir: str) -> demo_host.DemoKernel:
    """Build the demo host, point the agent and its drivers at it and
    start the demo's kernel stand-in."""
    tree = demo_host.build(os.path.join(state_dir, DEMO_DIR))
    CONF.set_override('host_root', tree.root, group='agent')
    CONF.set_override('enabled_drivers', demo_host.DRIVERS, group='agent')
    for group, options in demo_host.OPTIONS.items():
        for name, value in options.items():
            CONF.set_override(name, value, group=group)
    # The drivers run vendor commands found in PATH: the fake ones first.
    os.environ['PATH'] = os.pathsep.join(
        [tree.tools_dir, os.environ.get('PATH', os.defpath)])
    return demo_host.DemoKernel(tree).start()


def _examples(kernel: demo_host.DemoKernel | None, placement: str) -> str:
    """What the ready message suggests trying: the fake driver's device,
    or the demo hardware."""
    if kernel is None:
        return FAKE_EXAMPLES.format(placement=placement,
                                    trait='CUSTOM_FAKE_DEVICE')
    root = kernel.tree.root
    return DEMO_EXAMPLES.format(
        root=root, pgpu=demo_host.DEMO_PGPU,
        vgpu=demo_host.DEMO_VGPU_PARENT, vtype=demo_host.DEMO_VGPU_TYPE,
        vtrait=demo_host.DEMO_VGPU_TRAIT, qat=demo_host.DEMO_QAT_PF,
        nic=demo_host.DEMO_NIC_PF, physnet=demo_host.DEMO_PHYSNET,
        fpga=demo_host.DEMO_FPGA_PF,
        ptrait=demo_host.DEMO_PHYSNET_TRAIT, placement=placement)


def _set_bitstream_source(args: argparse.Namespace
                          ) -> local_images.ImageServer | None:
    """Point ``[glance]`` at ``--glance-url``, or at a local image
    service of ``--bitstream-dir`` (started here; returned to be
    stopped)."""
    if args.glance_url:
        glance_conf.use_endpoint(CONF, args.glance_url)
        return None
    if not args.bitstream_dir:
        return None
    images = local_images.ImageServer()
    images.load_directory(os.path.abspath(args.bitstream_dir))
    glance_conf.use_endpoint(CONF, images.start().url)
    return images


def _set_embedded_defaults(state_dir: str) -> None:
    CONF.set_default('state_path', state_dir)
    CONF.set_default('transport_url', constants.INPROC_TRANSPORT_URL)
    CONF.set_default('auth_strategy', 'noauth', group='api')
    CONF.set_default('connection', 'sqlite:///%s' % os.path.join(
        state_dir, 'cyborg.sqlite'), group='database')


def main(argv: list[str] | None = None) -> int:
    argv = argv or sys.argv
    args, rest = _parse(argv[1:])
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    config.register_logging_opts()
    config.parse_args([argv[0]] + rest)
    _set_embedded_defaults(state_dir)
    if args.host_root:
        CONF.set_override('host_root', os.path.abspath(args.host_root),
                          group='agent')
    kernel = _set_demo_hardware(state_dir) if args.demo_hardware else None
    if args.demo_hardware and not (args.glance_url or args.bitstream_dir):
        # The demo FPGA's bitstreams, served as --bitstream-dir would.
        args.bitstream_dir = os.path.join(state_dir, DEMO_BITSTREAMS_DIR)
        demo_host.write_bitstreams(args.bitstream_dir)
    try:
        images = _set_bitstream_source(args)
    except exception.ConfigInvalid as e:
        print('cyborg-all-in-one: %s' % e, file=sys.stderr)
        return 2
    config.setup_logging()
    authorizer = policies.Authorizer(policies.get_enforcer(CONF))
    handler = signals.install('cyborg-all-in-one', CONF,
                              {'policy file': authorizer.reload})

    db_api.configure(CONF)
    migration.upgrade()
    placement = embedded_placement.start(state_dir, args.host,
                                         args.placement_port)
    embedded_placement.ensure_compute_node(
        placement.client(), discovery.resource_provider_name(CONF))
    transport = rpc.get_transport(CONF)
    notifier = nova_notifier.Notifier(
        CONF.host, CONF, lambda: nova_client.client_from_conf(CONF))
    services = [
        conductor_service.create(
            CONF, transport,
            lambda: placement_client.PlacementClient.for_endpoint(
                placement.url, roles=CONDUCTOR_PLACEMENT_ROLES),
            notifier=notifier),
        agent_service.create(
            CONF, transport,
            glance_factory=lambda: glance.GlanceClient.from_conf(CONF)),
    ]
    for svc in services:
        svc.start()
    if not services[-1].wait_first_runs(FIRST_REPORT_TIMEOUT):
        LOG.warning('The first inventory report of %s did not finish '
                    'within %d seconds; the API starts without it',
                    CONF.host, FIRST_REPORT_TIMEOUT)
    app = api_app.setup_app(CONF, transport, authorizer)
    if images is not None and CONF.api.auth_strategy == 'noauth':
        # The CLI without Keystone finds the local Glance at the API's
        # endpoint; it is as open as the API is without authentication.
        app = local_images.ImagePaths(app, images)
    server = wsgi_server.WSGIServer(
        app, args.host, args.port, CONF.api.client_timeout,
        CONF.api.max_connections)
    server.start()
    endpoint = 'http://%s:%d' % (args.host, server.port)
    print(USAGE.format(endpoint=endpoint, placement=placement.url,
                       state_dir=state_dir,
                       examples=_examples(kernel, placement.url)),
          flush=True)
    handler.wait()
    print('Stopping...', flush=True)
    finished = _stop(server, services, placement, transport,
                     handler.grace())
    if kernel is not None:
        kernel.stop()
    if images is not None:
        images.stop()
    return handler.exit(finished)


def _stop(server, services, placement, transport, grace: float) -> bool:
    """Stop the API, then the conductor and the agent, within ``grace``
    seconds; whether the work in flight finished."""
    deadline = time.monotonic() + grace
    finished = server.stop(grace)
    for svc in reversed(services):
        finished = svc.stop(max(0.0, deadline - time.monotonic())) and finished
    placement.stop()
    rpc.cleanup(transport)
    return finished
