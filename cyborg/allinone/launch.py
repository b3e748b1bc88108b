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
host (named after ``[DEFAULT] host``), as nova-compute would. Everything
else comes from --config-file. The configuration is checked, and the
ports of the API and of Placement are claimed, before anything starts
(:func:`_configure`, :func:`_listen`); a non-loopback --host needs
--insecure-listen-anywhere. The ready message is
:mod:`cyborg.allinone.banner`'s.

--host-root DIR sets ``[agent] host_root``: the drivers read their
hardware under DIR, or the replay of the capture DIR names (a directory
or its archive, see :mod:`cyborg.hostcapture`). --demo-hardware builds a
demo host (two NVIDIA GPUs, a QAT with 4 VFs, a NIC with 4 VFs on
physnet1, an Intel FPGA, fake vendor commands) in the state directory,
enables the matching drivers and runs a stand-in for the kernel that
makes the vGPUs the driver creates appear; unless told otherwise, it
serves the demo FPGA's bitstreams (gzip, aes) as --bitstream-dir would.

FPGA bitstreams come from Glance: --glance-url URL points ``[glance]`` at
a Glance reached without keystone; --bitstream-dir DIR serves the images
described in DIR from a local, read-only Glance stand-in on loopback
(:mod:`cyborg.allinone.local_images`), so that programming runs the same
code (lookups, verified downloads) as against a real Glance.
"""

import argparse
import os
import sys
import time

from oslo_log import log as logging
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg import policies
from cyborg.agent import discovery
from cyborg.agent import service as agent_service
from cyborg.allinone import banner
from cyborg.allinone import demo_host
from cyborg.allinone import embedded_placement
from cyborg.allinone import local_images
from cyborg.api import app as api_app
from cyborg.api import wsgi_server
from cyborg.clients import glance
from cyborg.clients import nova as nova_client
from cyborg.clients import placement as placement_client
from cyborg.common import config
from cyborg.common import config_checks
from cyborg.common import constants
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import signals
from cyborg.conductor import notifier as nova_notifier
from cyborg.conductor import service as conductor_service
from cyborg.conductor import sync_worker
from cyborg.conf import CONF
from cyborg.conf import glance as glance_conf
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.hostcapture import replay

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

PROG = 'cyborg-all-in-one'

DESCRIPTION = """\
Runs the Cyborg API, conductor and agent, and a Placement service, in one
process on embedded defaults: SQLite in the state directory, an
in-process RPC transport, no Keystone (every request acts as an
administrator) and a compute node provider for this host in Placement,
named after [DEFAULT] host, as nova-compute would create it. Any other
option comes from --config-file; the common options of the other cyborg
commands (--config-dir, --debug, --log-file, ...) are accepted too.

Both servers listen on loopback: without authentication, listening on
another address hands administrator rights to whoever reaches it, so
--host with such an address also needs --insecure-listen-anywhere.

FPGA bitstreams come from Glance: --glance-url points at a Glance reached
without Keystone; --bitstream-dir serves the images described in a
directory from a local, read-only Glance on loopback.
"""

# Why a non-loopback --host needs --insecure-listen-anywhere.
INSECURE_LISTEN = (
    'refusing to listen on %s: %sthe embedded Placement accepts the '
    'fixed token "admin", so anyone who reaches this address would be an '
    'administrator; listen on 127.0.0.1, or pass '
    '--insecure-listen-anywhere if only trusted hosts can reach it')
NOAUTH_API = ('without Keystone every API request acts as an '
              'administrator, and ')


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog=PROG, description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--config-file', metavar='PATH', action='append',
                        default=[],
                        help='A cyborg.conf with any other option (may be '
                             'repeated; later files win).')
    parser.add_argument('--host', default='127.0.0.1',
                        help='Address the API and Placement listen on '
                             '(127.0.0.1).')
    parser.add_argument('--insecure-listen-anywhere', action='store_true',
                        help='Allow a --host beyond loopback although '
                             'Placement, and the API without Keystone, '
                             'accept anyone as an administrator.')
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
                               'host_root), or a host capture (its '
                               'directory or .tar.gz archive) to replay.')
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
    args, rest = parser.parse_known_args(argv)
    for path in args.config_file:
        rest += ['--config-file', path]
    return args, rest


def listen_problems(args: argparse.Namespace, auth_strategy: str
                    ) -> list[str]:
    """Why the all-in-one must not listen on ``args.host``: anything but
    loopback needs ``--insecure-listen-anywhere``."""
    if args.insecure_listen_anywhere or config_checks.is_loopback(args.host):
        return []
    return [INSECURE_LISTEN % (
        args.host, NOAUTH_API if auth_strategy == 'noauth' else '')]


def _configure(argv: list[str]) -> tuple[argparse.Namespace, str]:
    """Parse the command line and the config files into CONF, on the
    all-in-one's defaults, and check them; the arguments and the state
    directory. Raises ConfigProblems before anything is started or
    written."""
    args, rest = _parse(argv[1:])
    state_dir = os.path.abspath(os.path.expanduser(args.state_dir))
    config.register_logging_opts()
    config.parse_args([argv[0]] + rest)
    _set_embedded_defaults(state_dir)
    try:
        config.check(database=None)
    except config_checks.ConfigProblems as e:
        problems = e.problems
    else:
        # Only valid values can be read.
        problems = listen_problems(args, CONF.api.auth_strategy)
        try:
            discovery.check_identity(CONF.host,
                                     discovery.resource_provider_name(CONF))
        except exception.ConfigInvalid as e:
            problems.append(str(e))
    if os.path.exists(state_dir) and not os.path.isdir(state_dir):
        problems.append('--state-dir %s is not a directory' % state_dir)
    if problems:
        raise config_checks.ConfigProblems(problems)
    return args, state_dir


def _load_bitstreams(args: argparse.Namespace, state_dir: str
                     ) -> local_images.ImageServer | None:
    """Point ``[glance]`` at ``--glance-url``, or read the images of
    ``--bitstream-dir`` (by default, with --demo-hardware, the demo
    FPGA's, written here) into a local image service, not started yet.
    Raises ConfigProblems naming an image that cannot be read."""
    if args.demo_hardware and not (args.glance_url or args.bitstream_dir):
        # The demo FPGA's bitstreams, served as --bitstream-dir would.
        args.bitstream_dir = os.path.join(state_dir, DEMO_BITSTREAMS_DIR)
        demo_host.write_bitstreams(args.bitstream_dir)
    if args.glance_url:
        glance_conf.use_endpoint(CONF, args.glance_url)
        return None
    if not args.bitstream_dir:
        return None
    images = local_images.ImageServer()
    try:
        images.load_directory(os.path.abspath(args.bitstream_dir))
    except exception.ConfigInvalid as e:
        raise config_checks.ConfigProblems([str(e)])
    return images


def _listen(args: argparse.Namespace, state_dir: str):
    """Claim the API's port and start the embedded Placement, before
    anything else starts: (API server without its app, Placement).
    Raises ConfigProblems naming the address and the option to change
    when a port cannot be bound."""
    try:
        server = wsgi_server.WSGIServer(
            None, args.host, args.port, CONF.api.client_timeout,
            CONF.api.max_connections)
    except wsgi_server.CannotListen as e:
        raise config_checks.ConfigProblems(
            ['%s (the API); choose another port with --port' % e])
    try:
        placement = embedded_placement.start(state_dir, args.host,
                                             args.placement_port)
    except wsgi_server.CannotListen as e:
        server.stop()
        raise config_checks.ConfigProblems(
            ['%s (the embedded Placement); choose another port with '
             '--placement-port' % e])
    except BaseException:
        server.stop()
        raise
    return server, placement


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


def _set_embedded_defaults(state_dir: str) -> None:
    config.use_state_dir(CONF, state_dir)
    CONF.set_default('transport_url', constants.INPROC_TRANSPORT_URL)
    CONF.set_default('auth_strategy', 'noauth', group='api')
    # The compute node provider this process creates is named as the
    # devices' host ([DEFAULT] host); a standalone agent keeps the
    # default that matches nova-compute's node name (see [agent]
    # resource_provider_name).
    CONF.set_default('resource_provider_name', CONF.host, group='agent')


def main(argv: list[str] | None = None) -> int:
    argv = argv or sys.argv
    try:
        args, state_dir = _configure(argv)
        os.makedirs(state_dir, exist_ok=True)
        images = _load_bitstreams(args, state_dir)
        server, placement = _listen(args, state_dir)
    except config_checks.ConfigProblems as e:
        return config.print_problems(PROG, e.problems)
    config.setup_logging()
    started = []  # how to stop what started, should the start fail
    try:
        return _run(args, state_dir, server, placement, images, started)
    except BaseException as e:
        for stop in reversed(started):
            stop()
        server.stop()
        placement.stop()
        if isinstance(e, exception.ConfigInvalid):
            # A driver list that cannot be loaded: found as the agent
            # is created, before it starts.
            return config.print_problems(PROG, [str(e)])
        raise


def _run(args: argparse.Namespace, state_dir: str,
         server: wsgi_server.WSGIServer,
         placement: embedded_placement.EmbeddedPlacement,
         images: local_images.ImageServer | None, started: list) -> int:
    """Start the rest, print the ready banner and serve until a signal;
    the exit status."""
    if args.host_root:
        CONF.set_override('host_root', os.path.abspath(args.host_root),
                          group='agent')
    kernel = _set_demo_hardware(state_dir) if args.demo_hardware else None
    if kernel is not None:
        started.append(kernel.stop)
    if images is not None:
        glance_conf.use_endpoint(CONF, images.start().url)
        started.append(images.stop)
    # --host-root (or [agent] host_root) may name a capture: the drivers
    # read its replay.
    replay_host, replay_runner = replay.host_and_runner(CONF)
    authorizer = policies.Authorizer(policies.get_enforcer(CONF))
    handler = signals.install(PROG, CONF, {'policy file': authorizer.reload})

    db_api.configure(CONF)
    migration.upgrade()
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
            glance_factory=lambda: glance.GlanceClient.from_conf(CONF),
            runner=replay_runner, host_root=replay_host),
    ]
    for svc in services:
        svc.start()
        started.append(svc.stop)
    first_report = timeutils.StopWatch(FIRST_REPORT_TIMEOUT).start()
    # The conductor answers a report before it syncs Placement: wait for
    # both, so that the devices are schedulable once the API is open.
    if not (services[-1].wait_first_runs(FIRST_REPORT_TIMEOUT)
            and sync_worker.wait_synced(
                cyborg_context.get_admin_context(), CONF.host,
                first_report.leftover())):
        LOG.warning('The first inventory report of %s did not finish '
                    'within %d seconds; the API starts without it',
                    CONF.host, FIRST_REPORT_TIMEOUT)
    app = api_app.setup_app(CONF, transport, authorizer)
    if images is not None and CONF.api.auth_strategy == 'noauth':
        # The CLI without Keystone finds the local Glance at the API's
        # endpoint; it is as open as the API is without authentication.
        app = local_images.ImagePaths(app, images)
    server.set_app(app)
    server.start()
    print(banner.ready(banner.Endpoints(
        api='http://%s:%d' % (_url_host(args.host), server.port),
        placement=placement.url, state_dir=state_dir,
        glance=images.url if images is not None else None,
        **_metrics_urls()), kernel, images), flush=True)
    started.clear()  # from here on, a signal stops everything
    handler.wait()
    print('Stopping...', flush=True)
    finished = _stop(server, services, placement, transport,
                     handler.grace())
    if kernel is not None:
        kernel.stop()
    if images is not None:
        images.stop()
    return handler.exit(finished)


def _metrics_urls() -> dict[str, str]:
    """The conductor's and the agent's ``/metrics`` URLs for the banner
    (none when ``[metrics] enabled`` is off)."""
    if not CONF.metrics.enabled:
        return {}
    base = 'http://%s:%%d/metrics' % _url_host(CONF.metrics.listen_host)
    return {'conductor_metrics': base % CONF.metrics.conductor_port,
            'agent_metrics': base % CONF.metrics.agent_port}


def _url_host(host: str) -> str:
    return '[%s]' % host if ':' in host else host


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
