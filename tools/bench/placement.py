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

"""The Placement the benchmarks measure: as deployed, several worker
processes under a WSGI server, on PostgreSQL."""

import argparse
import os

from tests.functional import placement as placement_server
from tests.functional import servers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--placement-workers`` and ``--placement-server``."""
    parser.add_argument('--placement-workers', type=int, default=2,
                        help='Placement worker processes (2)')
    parser.add_argument('--placement-server', choices=servers.WSGI_SERVERS,
                        default=servers.default_wsgi_server(),
                        help='WSGI server of Placement (uwsgi, as devstack '
                        'deploys it, when installed: pip install uwsgi; '
                        'else gunicorn sync workers)')


def server(args: argparse.Namespace, pg: servers.PostgreSQLServer,
           workdir: str) -> placement_server.PlacementServer:
    """A Placement (not started) as ``args`` say, with its database in
    ``pg`` and its files under ``workdir``."""
    return placement_server.PlacementServer(
        base_dir=os.path.join(workdir, 'placement'),
        database_url=pg.create_database('placement'),
        workers=args.placement_workers, wsgi_server=args.placement_server)
