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

"""A three-node RabbitMQ cluster on the loopback, for functional tests.

Each node is a :class:`servers.RabbitMQServer` (its own node name, AMQP
and Erlang distribution ports, mnesia and log directories), but the
nodes share one private epmd port (Erlang nodes find each other through
the epmd of their host) and one Erlang cookie. The first node starts
alone; the others start together and join it at their first boot by
classic peer discovery (``cluster_formation.classic_config.nodes``
naming the first node in their config file: an operator's
config-file-built cluster; the same as ``rabbitmqctl join_cluster``
without three more Erlang VMs per node, each seconds of CPU). ::

    with RabbitMQCluster() as cluster:
        url = cluster.create_vhost('test')   # rabbit://h1,h2,h3/test
        cluster.restart(0)

A restarted node keeps its mnesia directory and rejoins the cluster by
itself. ``url`` lists every node: oslo.messaging connects to one and
fails over to the next when it goes away.
"""

from __future__ import annotations

from concurrent import futures
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

from tests.functional import servers

NODES = 3


class ClusterNode(servers.RabbitMQServer):
    """One node of a :class:`RabbitMQCluster`: the cluster's epmd port
    and cookie; stopping it leaves the shared epmd running."""

    # Nodes of a cluster watch each other over Erlang distribution: they
    # keep its default tick time.
    NET_TICKTIME = None

    def __init__(self, base_dir: str, epmd_port: int, cookie: str,
                 start_timeout: float = 90.0):
        super().__init__(base_dir, start_timeout=start_timeout)
        self.epmd_port = epmd_port
        self.cookie = cookie
        self.nodename = 'cyborgcluster%d@localhost' % self.port
        #: The node to join at the first boot (None: the first node).
        self.seed: str | None = None

    def _write_files(self) -> None:
        super()._write_files()
        if self.seed is not None:
            with open(os.path.join(self.base_dir, 'rabbitmq.conf'),
                      'a') as f:
                f.write('cluster_formation.peer_discovery_backend = '
                        'classic_config\n'
                        'cluster_formation.classic_config.nodes.1 = %s\n'
                        # No random wait before joining: the seed runs.
                        'cluster_formation.randomized_startup_delay_range'
                        '.min = 0\n'
                        'cluster_formation.randomized_startup_delay_range'
                        '.max = 0\n' % self.seed)
        path = os.path.join(self.base_dir, '.erlang.cookie')
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, 0o600)
        with open(path, 'w') as f:
            f.write(self.cookie)
        # Erlang refuses a cookie file others can read.
        os.chmod(path, 0o400)

    def _stop(self) -> None:
        if self.process is not None:
            servers.kill_group(self.process, signal.SIGTERM, timeout=30)

    def ctl(self, *args: str, timeout: float = 90) -> str:
        """``rabbitmqctl`` on this node; its output, or ServerError."""
        result = self.rabbitmqctl(*args, timeout=timeout)
        if result.returncode != 0:
            raise servers.ServerError('rabbitmqctl -n %s %s failed: %s%s'
                                      % (self.nodename, ' '.join(args),
                                         result.stdout, result.stderr))
        return result.stdout


class RabbitMQCluster:
    """:data:`NODES` clustered RabbitMQ nodes; a context manager that
    always stops every node and the shared epmd."""

    def __init__(self, nodes: int = NODES, base_dir: str | None = None):
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(
            prefix='cyborg-rabbit-cluster-')
        os.chmod(self.base_dir, 0o755)
        self.epmd_port = servers.free_port()
        cookie = secrets.token_hex(16).upper()
        self.nodes = [ClusterNode(os.path.join(self.base_dir, 'node%d' % i),
                                  self.epmd_port, cookie)
                      for i in range(nodes)]
        self._epmd = servers.find_binary('epmd', 'erlang-base')

    # Life cycle -----------------------------------------------------------

    def start(self) -> RabbitMQCluster:
        first = self.nodes[0]
        first.start()
        others = self.nodes[1:]
        for node in others:
            node.seed = first.nodename
        with futures.ThreadPoolExecutor(len(others)) as pool:
            for started in [pool.submit(node.start) for node in others]:
                started.result()
        self.wait_clustered()
        return self

    def wait_clustered(self, timeout: float = 60) -> None:
        """Until every node runs and sees the others running."""
        names = {node.nodename for node in self.nodes}

        def clustered():
            output = self.nodes[0].ctl('cluster_status', '--formatter',
                                       'json')
            status = json.loads(output)
            return set(status.get('running_nodes', ())) == names
        servers.wait_for(clustered, timeout, 'RabbitMQ cluster of %d nodes'
                         % len(self.nodes), interval=1)

    def stop(self) -> None:
        errors = []
        for node in reversed(self.nodes):
            try:
                node.stop()
            except Exception as e:  # pragma: no cover - best effort
                errors.append(e)
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run([self._epmd, '-port', str(self.epmd_port),
                            '-kill'], env=self.nodes[0].env(),
                           stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10,
                           check=False)
        if errors:
            raise errors[0]

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            if self._own_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> RabbitMQCluster:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc_info) -> None:
        self.cleanup()

    # Faults -------------------------------------------------------------

    def stop_node(self, index: int) -> None:
        """Stop node ``index`` (SIGTERM: the Erlang VM's clean shutdown)."""
        self.nodes[index].stop()

    def start_node(self, index: int) -> None:
        """Start node ``index`` again on its ports and mnesia directory;
        it rejoins the cluster by itself."""
        # The node syncs with its running peers before it opens its AMQP
        # listener, which start() waits for.
        self.nodes[index].start()

    def restart(self, index: int, down: float = 0.0) -> float:
        """Stop node ``index``, wait ``down`` seconds, start it again; the
        seconds it was unreachable."""
        started = time.monotonic()
        self.stop_node(index)
        time.sleep(down)
        self.start_node(index)
        return time.monotonic() - started

    # Clients --------------------------------------------------------------

    @property
    def url(self) -> str:
        """A ``rabbit://`` URL listing every node (user guest)."""
        return 'rabbit://%s/' % ','.join(
            'guest:guest@%s:%d' % (servers.LOOPBACK, node.port)
            for node in self.nodes)

    def create_vhost(self, name: str) -> str:
        """A new virtual host usable by guest on every node (the cluster
        shares its definitions); its transport URL."""
        node = self.nodes[0]
        node.ctl('add_vhost', name)
        node.ctl('set_permissions', '-p', name, 'guest', '.*', '.*', '.*')
        return self.url + name

    def queues(self, vhost: str) -> dict[str, dict]:
        """The queues of ``vhost``: name -> {'type', 'pid', 'leader',
        'consumers'}, as the first running node lists them."""
        node = next(n for n in self.nodes if n.started)
        output = node.ctl('list_queues', '-p', vhost, '--formatter', 'json',
                          'name', 'type', 'pid', 'leader', 'consumers')
        return {row['name']: row for row in json.loads(output)}

    def queue_node(self, vhost: str, queue: str) -> int:
        """The index of the node holding ``queue`` (a classic queue's
        node, a quorum queue's leader)."""
        row = self.queues(vhost)[queue]
        # A quorum queue names its leader's node; a classic queue's pid
        # does not print its node: ask each node for its own queues.
        for index, node in enumerate(self.nodes):
            if row.get('leader'):
                if row['leader'] == node.nodename:
                    return index
            elif node.started and queue in {r['name'] for r in json.loads(
                    node.ctl('list_queues', '-p', vhost, '--local',
                             '--formatter', 'json', 'name'))}:
                return index
        raise servers.ServerError('no node holds queue %s: %s'
                                  % (queue, row))
