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

"""A three-node MariaDB Galera cluster on the loopback, for functional
tests and the Nova cycle benchmark::

    with GaleraCluster() as cluster:
        url = cluster.create_database('cyborg')   # through node 0
        other = cluster.nodes[1].url_for('cyborg')  # same data, node 1

Every node is a :class:`servers.MariaDBServer` of its own (datadir,
socket, SQL port) with Debian's Galera 4 provider (package ``galera-4``)
and private ports for group communication, incremental state transfer
(IST) and state snapshot transfer (SST, by ``rsync``: it needs no root
and no account). Node 0 bootstraps the cluster (``--wsrep-new-cluster``);
nodes 1 and 2 join it and receive its data by SST. :meth:`GaleraNode.kill`
and :meth:`GaleraNode.restart` are a node crash and its return (by IST).

The failure detector is tightened (a killed node leaves the cluster's
view after about two seconds instead of the default five), so that a
test's outage window stays short, and a donor refuses queries while it
gives a state transfer; both are explained in the admin guide's
*MariaDB Galera clusters*. ``durable=True`` keeps the server's durable
default (the log flushed at every commit) for the benchmark.
"""

from __future__ import annotations

import os
import signal
import time

from tests.functional import servers

PROVIDER_PACKAGE = 'galera-4'
PROVIDER_PATHS = ('/usr/lib/galera/libgalera_smm.so',
                  '/usr/lib/libgalera_smm.so',
                  '/usr/lib64/galera-4/libgalera_smm.so')
NODES = 3
# Group communication timeouts (ISO 8601 durations). A SIGKILLed node's
# peers see its sockets close, but only evict it from the view after
# suspect_timeout; commits of the other nodes wait for the new view.
PROVIDER_TIMEOUTS = ('evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S;'
                     'evs.keepalive_period=PT0.5S;'
                     'evs.inactive_check_period=PT0.5S;'
                     'evs.install_timeout=PT3S')


def provider_path() -> str:
    """The Galera provider library; fails naming its Debian package."""
    for path in PROVIDER_PATHS:
        if os.path.exists(path):
            return path
    raise servers.ServerError(
        'the Galera provider libgalera_smm.so not found: install the '
        'Debian package %r (apt-get install -y %s)'
        % (PROVIDER_PACKAGE, PROVIDER_PACKAGE))


class GaleraNode(servers.MariaDBServer):
    """One node of a :class:`GaleraCluster`; ``index`` 0 bootstraps."""

    def __init__(self, index: int, cluster_address: str, group_port: int,
                 base_dir: str | None = None, durable: bool = False):
        super().__init__(base_dir)
        #: With the server's durable defaults (an fsync per commit)
        #: rather than a log flushed once a second.
        self.durable = durable
        self.index = index
        self.cluster_address = cluster_address
        self.group_port = group_port
        self.ist_port = servers.free_port()
        self.sst_port = servers.free_port()
        self.provider = provider_path()
        # rsync SST runs rsync and reads its configuration through
        # my_print_defaults, so the node's options live in a file.
        self.config_file = os.path.join(self.base_dir, 'my.cnf')
        servers.find_binary('rsync', 'rsync')
        self.bootstrap = index == 0
        #: Whether :meth:`start` waits until the node is synced.
        self.wait = True
        #: Where a restarted node's state starts (``uuid:seqno``).
        self.start_position: str | None = None

    def _options(self) -> dict[str, str]:
        """The node's my.cnf options."""
        provider_options = ('gmcast.listen_addr=tcp://%s:%d;'
                            'ist.recv_addr=%s:%d;gcache.size=64M;%s'
                            % (servers.LOOPBACK, self.group_port,
                               servers.LOOPBACK, self.ist_port,
                               PROVIDER_TIMEOUTS))
        options = {
            'datadir': self.data_dir, 'tmpdir': self.tmp_dir,
            'socket': self.socket, 'port': str(self.port),
            'bind-address': servers.LOOPBACK,
            'pid-file': os.path.join(self.base_dir, 'mysqld.pid'),
            'innodb-flush-log-at-trx-commit': '0',
            'innodb-buffer-pool-size': '32M',
            'innodb-log-file-size': '8M',
            'skip-name-resolve': '1',
            'character-set-server': 'utf8mb4',
            # What Galera requires of every node.
            'binlog-format': 'ROW',
            'default-storage-engine': 'InnoDB',
            'innodb-autoinc-lock-mode': '2',
            'wsrep-on': 'ON',
            'wsrep-provider': self.provider,
            'wsrep-provider-options': provider_options,
            'wsrep-cluster-name': 'cyborg-test',
            'wsrep-cluster-address': self.cluster_address,
            'wsrep-node-name': 'node%d' % self.index,
            'wsrep-node-address': '%s:%d' % (servers.LOOPBACK,
                                             self.group_port),
            'wsrep-sst-method': 'rsync',
            'wsrep-sst-receive-address': '%s:%d' % (servers.LOOPBACK,
                                                    self.sst_port),
            'wsrep-slave-threads': '2',
            # A donor lags the cluster while it gives a state transfer,
            # and answers reads from that stale state: it refuses
            # queries instead (1047, retried by the services), as the
            # admin guide asks of a cluster with several writers.
            'wsrep-sst-donor-rejects-queries': 'ON',
        }
        if self.durable:
            del options['innodb-flush-log-at-trx-commit']
        return options

    def _write_config(self) -> None:
        lines = ['[mysqld]'] + ['%s=%s' % item
                                for item in self._options().items()]
        with open(self.config_file, 'w') as f:
            f.write('\n'.join(lines) + '\n')

    def _start(self) -> None:
        os.chmod(self.base_dir, 0o755)
        os.makedirs(self.tmp_dir, exist_ok=True)
        self._write_config()
        if self.bootstrap and not os.path.isdir(
                os.path.join(self.data_dir, 'mysql')):
            servers.chown_tree(self.base_dir, self.user)
            servers.run_logged(servers.as_user(self.user, [
                self._install_db, '--no-defaults',
                '--datadir=' + self.data_dir, '--tmpdir=' + self.tmp_dir,
                '--auth-root-authentication-method=normal',
                '--skip-test-db', '--user=' + (self.user or 'root')]),
                self.log, 'mariadb-install-db', cwd=self.base_dir,
                timeout=180)
        os.makedirs(self.data_dir, exist_ok=True)
        servers.chown_tree(self.base_dir, self.user)
        argv = [self._mysqld, '--defaults-file=' + self.config_file]
        if self.bootstrap:
            argv.append('--wsrep-new-cluster')
        if self.start_position:
            argv.append('--wsrep-start-position=' + self.start_position)
        self.process = servers.spawn(servers.as_user(self.user, argv),
                                     self.log, cwd=self.base_dir)
        if self.wait:
            self.wait_synced()

    def wait_synced(self) -> None:
        """Wait until the node has joined and serves clients."""
        servers.wait_for(self._synced, self.start_timeout,
                         'Galera node %d on port %d' % (self.index,
                                                        self.port),
                         self.process, self.log, interval=0.2)

    def status(self, name: str) -> str | None:
        """A ``SHOW GLOBAL STATUS`` value of this node."""
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
                row = cur.fetchone()
        finally:
            conn.close()
        return row[1] if row else None

    def _synced(self) -> bool:
        return self.status('wsrep_local_state_comment') == 'Synced'

    def kill(self) -> None:
        """SIGKILL the node, as a crash or a power cut would."""
        if self.process is not None:
            servers.kill_group(self.process, signal.SIGKILL, timeout=5)

    def restart(self) -> None:
        """Start the killed node again, as systemd's ``galera_recovery``
        does: its last committed position recovered from InnoDB first
        (``--wsrep-recover``), so that it rejoins the cluster (never
        bootstraps it) and catches up by IST. Without the position it
        would need a whole snapshot (SST), and an rsync donor serves
        stale reads while it gives one (see the admin guide)."""
        self.bootstrap = False
        self.process = None
        recover_log = os.path.join(self.base_dir, 'recover.log')
        servers.run_logged(servers.as_user(self.user, [
            self._mysqld, '--defaults-file=' + self.config_file,
            '--wsrep-recover', '--log-error=' + recover_log]),
            self.log, 'mariadbd --wsrep-recover', cwd=self.base_dir)
        position = None
        with open(recover_log, errors='replace') as f:
            for line in f:
                if 'WSREP: Recovered position:' in line:
                    position = line.rsplit(' ', 1)[-1].strip()
        if position is None:
            raise servers.ServerError('no position recovered:\n%s'
                                      % servers.tail(recover_log))
        self.start_position = position
        self._start()

    def _stop(self) -> None:
        # The data is thrown away: no clean shutdown (leaving the cluster
        # cleanly costs seconds per node).
        self.kill()


class GaleraCluster:
    """:data:`NODES` :class:`GaleraNode` s forming one cluster; a context
    manager that stops them all (last started first)."""

    def __init__(self, nodes: int = NODES, durable: bool = False):
        group_ports = [servers.free_port() for _ in range(nodes)]
        address = 'gcomm://' + ','.join('%s:%d' % (servers.LOOPBACK, port)
                                        for port in group_ports)
        self.nodes = [GaleraNode(index, address, port, durable=durable)
                      for index, port in enumerate(group_ports)]

    def start(self) -> GaleraCluster:
        first, *joiners = self.nodes
        first.start()
        # The joiners start together; the donor serves their snapshots.
        for node in joiners:
            node.wait = False
            node.start()
        for node in joiners:
            node.wait_synced()
            node.wait = True
        self.wait_size(len(self.nodes))
        return self

    def wait_size(self, size: int, timeout: float = 60.0) -> None:
        """Wait until every live node sees a primary cluster of
        ``size`` nodes."""
        def formed():
            return all(node.status('wsrep_cluster_size') == str(size)
                       and node.status('wsrep_cluster_status') == 'Primary'
                       for node in self.nodes
                       if node.process is not None
                       and node.process.poll() is None)
        servers.wait_for(formed, timeout, 'a Galera cluster of %d' % size,
                         interval=0.2)

    def create_database(self, name: str) -> str:
        """Create ``name`` (replicated to every node); node 0's URL."""
        return self.nodes[0].create_database(name)

    def drop_database(self, name: str) -> None:
        self.nodes[0].drop_database(name)

    def urls(self, database: str) -> list[str]:
        """The URL of ``database`` through each node."""
        return [node.url_for(database) for node in self.nodes]

    def conflicts(self) -> dict[str, int]:
        """Local transactions the cluster rolled back since the nodes
        started, over every live node: ``cert_failures`` (a conflict
        with a transaction committed through another node, found at
        COMMIT) and ``bf_aborts`` (aborted by a replicated transaction
        that needed their locks, gap locks among them); the services
        retry both (1213)."""
        totals = {'cert_failures': 0, 'bf_aborts': 0}
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            for key in totals:
                totals[key] += int(node.status('wsrep_local_' + key) or 0)
        return totals

    def certification_failures(self) -> int:
        """Both kinds of :meth:`conflicts`, in all."""
        return sum(self.conflicts().values())

    def stop(self) -> None:
        errors = []
        for node in reversed(self.nodes):
            try:
                node.cleanup()
            except Exception as e:  # pragma: no cover - best effort
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> GaleraCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info) -> None:
        self.stop()


def wait_gone(node: GaleraNode, cluster: GaleraCluster,
              timeout: float = 30.0) -> float:
    """Wait until the other nodes have evicted the killed ``node``; the
    seconds it took."""
    started = time.monotonic()
    cluster.wait_size(len(cluster.nodes) - 1, timeout)
    return time.monotonic() - started
