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

"""Private service instances for functional tests.

Every helper here starts a real server process on a free loopback port,
keeps all of its state in a temporary directory of its own and is a
context manager that always stops it again::

    with PostgreSQLServer() as pg, RabbitMQServer() as mq:
        url = pg.create_database('cyborg')
        with CyborgProcess('cyborg-conductor', config) as conductor:
            ...

Processes are started in a new session (their own process group), so that
stopping kills the whole tree, also when a start fails half-way. Nothing is
skipped: a missing binary is an error that names the Debian package that
provides it.

PostgreSQL, MariaDB and RabbitMQ refuse (or prefer not) to run as root;
when the tests run as root the database servers are run as their system
users (``postgres``, ``mysql``) through ``runuser`` and their directories
are chowned to them.
"""

from __future__ import annotations

import base64
import collections
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from tests.functional import forkserver

# What :func:`spawn` starts: a child, or a process of the fork server.
Process = subprocess.Popen | forkserver.ForkedProcess

PG_BIN_DIRS = sorted(
    (os.path.join('/usr/lib/postgresql', v, 'bin')
     for v in (os.listdir('/usr/lib/postgresql')
               if os.path.isdir('/usr/lib/postgresql') else ())),
    key=lambda p: [int(x) for x in p.split('/')[-2].split('.')
                   if x.isdigit()], reverse=True)

LOOPBACK = '127.0.0.1'


class ServerError(RuntimeError):
    """A server could not be started or stopped."""


# Helpers ------------------------------------------------------------------

def _xdist_slot() -> tuple[int, int]:
    """(this worker's index, number of workers) under pytest-xdist,
    (0, 1) in a run without workers."""
    worker = os.environ.get('PYTEST_XDIST_WORKER', '')
    count = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1') or 1)
    if not worker.startswith('gw') or count < 2:
        return 0, 1
    return int(worker[2:]) % count, count


#: The ports free_port() handed out last, in this process.
_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=256)


def free_port() -> int:
    """A TCP port on the loopback interface that is free right now.

    Under pytest-xdist each worker takes only ports of its own share
    (``(port >> 1) % workers``: Linux hands bind(0) odd ports only, so
    the lowest bit cannot tell them apart), so two workers never pick
    the same port between its pick and the server's bind.
    """
    worker, count = _xdist_slot()
    for _attempt in range(64 * count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        # Not one handed out lately: a server given it may not have bound
        # it yet (a Galera node's SQL port once equalled another node's
        # group port, picked before either started).
        if (port >> 1) % count == worker and port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port
    raise ServerError('no free loopback port for worker %d of %d'
                      % (worker, count))


def find_binary(name: str, package: str,
                directories: Sequence[str] = ()) -> str:
    """The path of executable ``name``; fails naming the apt ``package``."""
    for directory in directories:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name) or shutil.which(
        name, path='/usr/sbin:/sbin:/usr/local/sbin')
    if found:
        return found
    raise ServerError('%s not found: install the Debian package %r '
                      '(apt-get install -y %s)' % (name, package, package))


def venv_script(name: str) -> str:
    """A console script installed beside the running interpreter."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.access(path, os.X_OK):
        raise ServerError('console script %s not found beside %s: install '
                          'the project (pip install -e .)'
                          % (name, sys.executable))
    return path


WSGI_SERVERS = ('gunicorn', 'uwsgi')


def default_wsgi_server() -> str:
    """uwsgi when installed in the virtualenv (as devstack deploys the
    APIs; ``pip install uwsgi``), else gunicorn (a test requirement)."""
    uwsgi = os.path.join(os.path.dirname(sys.executable), 'uwsgi')
    return 'uwsgi' if os.access(uwsgi, os.X_OK) else 'gunicorn'


def wsgi_argv(server: str, app: str, port: int, processes: int,
              threads: int = 0, chdir: str | None = None) -> list[str]:
    """The command serving WSGI ``app`` (``module:callable``) over HTTP
    on LOOPBACK:``port`` with ``processes`` workers of ``threads``
    threads (0: single-threaded workers).

    gunicorn: gthread workers keep connections alive, sync workers
    (``threads=0``) close each one. uwsgi: as devstack runs an API
    (master, an application loaded in each worker), behind uWSGI's own
    HTTP router instead of Apache: the router keeps any number of client
    connections alive and hands each request to a free worker thread.
    """
    if server == 'gunicorn':
        argv = [venv_script('gunicorn'), '--workers', str(processes),
                '--bind', '%s:%d' % (LOOPBACK, port),
                '--log-level', 'warning']
        if threads:
            argv += ['--worker-class', 'gthread', '--threads', str(threads)]
        if chdir:
            argv += ['--chdir', chdir]
        return argv + [app]
    if server != 'uwsgi':
        raise ValueError('unknown WSGI server %r' % server)
    argv = [venv_script('uwsgi'), '--master', '--lazy-apps',
            '--enable-threads', '--die-on-term', '--need-app',
            '--disable-logging', '--buffer-size', '65535',
            '--virtualenv', sys.prefix, '--processes', str(processes),
            '--http', '%s:%d' % (LOOPBACK, port), '--http-keepalive',
            '--http-auto-chunked', '--module', app]
    if threads:
        argv += ['--threads', str(threads)]
    if chdir:
        argv += ['--chdir', chdir]
    return argv


def as_user(user: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run as ``user`` (with runuser) when we are root."""
    if user is None or os.geteuid() != 0:
        return list(argv)
    runuser = find_binary('runuser', 'util-linux')
    return [runuser, '-u', user, '--'] + list(argv)


def system_user(name: str, package: str) -> str | None:
    """``name`` if we are root (and it exists), else None (run as us)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise ServerError('system user %r does not exist: install the '
                          'Debian package %r' % (name, package))
    return name


def chown_tree(path: str, user: str | None) -> None:
    if user is None:
        return
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in [root] + [os.path.join(root, n) for n in dirs + files]:
            os.lchown(name, entry.pw_uid, entry.pw_gid)


def tail(path: str, lines: int = 40) -> str:
    """The end of a log file, for error messages."""
    try:
        with open(path, errors='replace') as f:
            return ''.join(f.readlines()[-lines:])
    except OSError as e:
        return '<cannot read %s: %s>' % (path, e)


def wait_for(predicate, timeout: float, what: str, process=None,
             log: str | None = None, interval: float = 0.1):
    """Poll ``predicate`` until it returns a true value, and return it.

    Fails early if ``process`` exits meanwhile; the message includes the
    end of ``log``.
    """
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServerError('%s: process exited with %s while waiting.\n%s'
                              % (what, process.returncode,
                                 tail(log) if log else ''))
        try:
            result = predicate()
        except Exception as e:
            last_error = e
        else:
            if result:
                return result
        time.sleep(interval)
    raise ServerError('%s: not ready after %ss (last error: %r)\n%s'
                      % (what, timeout, last_error, tail(log) if log else ''))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(process: Process, sig=signal.SIGTERM,
               timeout: float = 15.0) -> None:
    """Send ``sig`` to the process group of ``process`` and reap it.

    Escalates to SIGKILL for the whole group when the leader does not exit
    within ``timeout``, and also kills any group member left after the
    leader exited.
    """
    pgid = process.pid  # started with start_new_session=True
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
    deadline = time.monotonic() + 5
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def spawn(argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
          cwd: str | None = None) -> Process:
    """Start ``argv`` in its own session with output appended to ``log``
    (through the fork server where it can: :mod:`.forkserver`)."""
    with open(log, 'ab') as out:
        forked = forkserver.popen(argv, out.fileno(), out.fileno(), env=env,
                                  cwd=cwd)
        if forked is not None:
            return forked
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT,
                                env=dict(env) if env is not None else None,
                                cwd=cwd, start_new_session=True)


def run(argv: Sequence[str], env: Mapping[str, str] | None = None,
        cwd: str | None = None, timeout: float = 120
        ) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` of ``argv`` to completion, its output
    captured as text, stdin from /dev/null (through the fork server where
    it can: :mod:`.forkserver`)."""
    result = forkserver.run(argv, env=env, cwd=cwd, timeout=timeout)
    if result is not None:
        return result
    return subprocess.run(list(argv), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, check=False)


def run_logged(argv: Sequence[str], log: str, what: str,
               cwd: str | None = None, timeout: float = 120) -> None:
    """Run a set-up command to completion; fail with its output if it does."""
    process = spawn(argv, log, cwd=cwd)
    try:
        returncode = process.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(process, signal.SIGKILL)
        raise
    if returncode != 0:
        raise ServerError('%s failed with exit code %s:\n%s'
                          % (what, returncode, tail(log)))


class _Server:
    """Common life cycle: ``start``/``stop`` plus the context manager.

    A failing ``start`` stops whatever it had started before raising.
    """

    def __init__(self, base_dir: str | None = None, prefix='server-'):
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix=prefix)
        os.makedirs(self.base_dir, exist_ok=True)
        self.process: subprocess.Popen | None = None
        self.started = False

    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.started = True
        return self

    def stop(self) -> None:
        try:
            self._stop()
        finally:
            if self.process is not None:
                kill_group(self.process, signal.SIGKILL, timeout=5)
            self.started = False

    def cleanup(self) -> None:
        """Stop, then remove the temporary directory if we made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        if self.process is not None:
            kill_group(self.process)

    def __enter__(self):
        # Also remove the directory when the start fails (__exit__ is not
        # called then).
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc_info):
        self.cleanup()

    def log_text(self) -> str:
        """The server's log (``self.log``) as text."""
        with open(self.log, errors='replace') as f:
            return f.read()


# PostgreSQL ---------------------------------------------------------------

class PostgreSQLServer(_Server):
    """A throw-away PostgreSQL cluster on 127.0.0.1:<free port>.

    ``initdb`` makes a new cluster with trust authentication for the
    ``postgres`` superuser; the server runs with fsync and synchronous
    commit off (data safety does not matter here, speed does) and keeps its
    unix socket in the temporary directory. ``url`` is the SQLAlchemy URL
    of the ``postgres`` database; :meth:`create_database` makes more.

    ``durable``: the server as production runs it instead, with
    PostgreSQL's defaults (fsync, synchronous commit and full page writes
    on, its default shared buffers), for benchmarks that must pay for
    every commit's flush.
    """

    PACKAGE = 'postgresql'
    SUPERUSER = 'postgres'

    def __init__(self, base_dir: str | None = None, start_timeout=60.0,
                 durable: bool = False, dump_dir: str | None = None):
        super().__init__(base_dir, prefix='cyborg-pg-')
        self.durable = durable
        #: Where :meth:`load_schema` keeps its schema dumps (a
        #: directory every server of the test run shares); None: each
        #: schema is built again for every database.
        self.dump_dir = dump_dir
        self.port = free_port()
        self.data_dir = os.path.join(self.base_dir, 'data')
        self.socket_dir = self.base_dir
        self.log = os.path.join(self.base_dir, 'postgres.log')
        self.start_timeout = start_timeout
        self.user = system_user('postgres', self.PACKAGE)
        self._initdb = find_binary('initdb', self.PACKAGE, PG_BIN_DIRS)
        self._postgres = find_binary('postgres', self.PACKAGE, PG_BIN_DIRS)
        self._pg_ctl = find_binary('pg_ctl', self.PACKAGE, PG_BIN_DIRS)
        self._pg_dump = find_binary('pg_dump', self.PACKAGE, PG_BIN_DIRS)
        self._psql = find_binary('psql', self.PACKAGE, PG_BIN_DIRS)

    def url_for(self, database: str) -> str:
        return 'postgresql+psycopg2://%s@%s:%d/%s' % (
            self.SUPERUSER, LOOPBACK, self.port, database)

    @property
    def url(self) -> str:
        return self.url_for('postgres')

    def _start(self) -> None:
        os.chmod(self.base_dir, 0o755)
        chown_tree(self.base_dir, self.user)
        run_logged(as_user(self.user, [
            self._initdb, '-D', self.data_dir, '-U', self.SUPERUSER,
            '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync',
            '--no-instructions']), self.log, 'initdb', cwd=self.base_dir)
        self.process = spawn(as_user(self.user, [
            self._postgres, '-D', self.data_dir, '-p', str(self.port),
            '-k', self.socket_dir, '-c', 'listen_addresses=' + LOOPBACK,
            '-c', 'max_connections=100', '-c', 'log_min_messages=warning',
        ] + self._speed_args()), self.log, cwd=self.base_dir)
        wait_for(self._ready, self.start_timeout, 'PostgreSQL on port %d'
                 % self.port, self.process, self.log)

    def _speed_args(self) -> list[str]:
        """What trades data safety for speed (none when durable)."""
        if self.durable:
            return []
        return ['-c', 'fsync=off', '-c', 'synchronous_commit=off',
                '-c', 'full_page_writes=off', '-c', 'shared_buffers=32MB']

    def _connect(self, database='postgres'):
        import psycopg2
        return psycopg2.connect(host=LOOPBACK, port=self.port,
                                user=self.SUPERUSER, dbname=database,
                                connect_timeout=2)

    def _ready(self) -> bool:
        self._connect().close()
        return True

    def execute(self, sql: str, database='postgres') -> None:
        """Run one statement outside a transaction (e.g. CREATE DATABASE)."""
        conn = self._connect(database)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its SQLAlchemy URL."""
        self.execute('CREATE DATABASE "%s"' % name)
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        self.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)

    def load_schema(self, name: str, schema: str,
                    build: Callable[[str], None]) -> None:
        """Give the empty database ``name`` the schema ``schema``.

        ``build(url)`` makes the schema in an empty database (e.g. a
        service's own ``db sync``). It runs once per test run: the first
        caller of any server (any xdist worker) builds it in a database
        of its own and keeps a ``pg_dump`` of it in :attr:`dump_dir`;
        every database is then restored from the dump, which costs a
        fraction of running a long migration history again. Without a
        ``dump_dir``, ``build`` runs on ``name`` itself.
        """
        if self.dump_dir is None:
            build(self.url_for(name))
            return
        dump = self._schema_dump(schema, build)
        run_logged([self._psql, '-X', '-q', '-v', 'ON_ERROR_STOP=1',
                    '-h', LOOPBACK, '-p', str(self.port),
                    '-U', self.SUPERUSER, '-d', name, '-f', dump],
                   self.log, 'restoring %s into %s' % (dump, name))

    def _schema_dump(self, schema: str,
                     build: Callable[[str], None]) -> str:
        """The dump of ``schema``, built first if no caller has yet."""
        assert self.dump_dir is not None
        path = os.path.join(self.dump_dir, 'schema-%s.sql' % schema)
        with open(path + '.lock', 'w') as lock:
            # Another worker building the same schema: wait for its dump
            # rather than spend the CPU on building it twice.
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(path):
                return path
            name = 'schema_%s_%d' % (schema, self.port)
            url = self.create_database(name)
            try:
                build(url)
                run_logged([self._pg_dump, '--no-owner', '--no-privileges',
                            '-h', LOOPBACK, '-p', str(self.port),
                            '-U', self.SUPERUSER, '-f', path + '.part',
                            name], self.log, 'pg_dump of %s' % name)
                os.rename(path + '.part', path)
            finally:
                self.drop_database(name)
        return path

    def _stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        # Fast shutdown: SIGTERM would be "smart" and wait for clients.
        subprocess.run(as_user(self.user, [
            self._pg_ctl, 'stop', '-D', self.data_dir, '-m', 'fast', '-w',
            '-t', '30']), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, check=False, timeout=60,
            cwd=self.base_dir)
        kill_group(self.process, signal.SIGINT)


# MariaDB / MySQL ------------------------------------------------------------

class MariaDBServer(_Server):
    """A throw-away MariaDB server on 127.0.0.1:<free port>.

    Its own datadir is initialised with ``mariadb-install-db`` (root may
    connect from the loopback without a password); networking is bound to
    the loopback only and the unix socket lives in the temporary directory.
    The redo log is written at every commit but flushed about once a
    second (``innodb_flush_log_at_trx_commit=0``), in a small buffer pool.

    ``durable``: the server as production runs it instead, with
    MariaDB's defaults (the redo log flushed at every commit, its default
    buffer pool and redo log sizes; the binary log off, as it is by
    default), for benchmarks that must pay for every commit's flush.
    """

    PACKAGE = 'mariadb-server'

    def __init__(self, base_dir: str | None = None, start_timeout=90.0,
                 durable: bool = False):
        super().__init__(base_dir, prefix='cyborg-mariadb-')
        self.durable = durable
        self.port = free_port()
        self.data_dir = os.path.join(self.base_dir, 'data')
        self.socket = os.path.join(self.base_dir, 'mysqld.sock')
        self.log = os.path.join(self.base_dir, 'mariadb.log')
        # Its own temporary directory: the bootstrap's temporary tables
        # otherwise live in the machine's shared /tmp, where anything else
        # cleaning it made ``mariadb-install-db`` fail (``Could not remove
        # temporary table``, then ``Unknown table mysql.tmp_proxies_priv``).
        self.tmp_dir = os.path.join(self.base_dir, 'tmp')
        self.start_timeout = start_timeout
        self.user = system_user('mysql', self.PACKAGE)
        self._install_db = find_binary('mariadb-install-db', self.PACKAGE)
        self._mysqld = find_binary('mariadbd', self.PACKAGE,
                                   ['/usr/sbin'])

    def url_for(self, database: str) -> str:
        # The server has no TLS; PyMySQL would otherwise try it on each
        # connection ("preferred" mode), building an SSL context that
        # loads the system's CA store first: about 60 ms of CPU per
        # connection, for nothing.
        return ('mysql+pymysql://root@%s:%d/%s?charset=utf8mb4'
                '&ssl_disabled=1' % (LOOPBACK, self.port, database))

    @property
    def url(self) -> str:
        return self.url_for('mysql')

    def _server_args(self) -> list[str]:
        return ['--no-defaults', '--datadir=' + self.data_dir,
                '--tmpdir=' + self.tmp_dir, '--socket=' + self.socket,
                '--port=%d' % self.port, '--bind-address=' + LOOPBACK,
                '--pid-file=' + os.path.join(self.base_dir, 'mysqld.pid'),
                '--skip-log-bin', '--skip-name-resolve',
                '--character-set-server=utf8mb4'] + self._speed_args()

    def _speed_args(self) -> list[str]:
        """What trades data safety for speed (none when durable)."""
        if self.durable:
            return []
        return ['--innodb-flush-log-at-trx-commit=0',
                '--innodb-buffer-pool-size=32M', '--innodb-log-file-size=8M']

    def _start(self) -> None:
        os.chmod(self.base_dir, 0o755)
        os.makedirs(self.tmp_dir, exist_ok=True)
        chown_tree(self.base_dir, self.user)
        run_logged(as_user(self.user, [
            self._install_db, '--no-defaults', '--datadir=' + self.data_dir,
            '--tmpdir=' + self.tmp_dir,
            '--auth-root-authentication-method=normal', '--skip-test-db',
            '--user=' + (self.user or pwd.getpwuid(os.geteuid()).pw_name)]),
            self.log, 'mariadb-install-db', cwd=self.base_dir, timeout=180)
        self.process = spawn(as_user(self.user, [self._mysqld]
                                     + self._server_args()),
                             self.log, cwd=self.base_dir)
        wait_for(self._ready, self.start_timeout, 'MariaDB on port %d'
                 % self.port, self.process, self.log)

    def _connect(self, database=None):
        import pymysql
        return pymysql.connect(host=LOOPBACK, port=self.port, user='root',
                               database=database, connect_timeout=2,
                               autocommit=True)

    def _ready(self) -> bool:
        self._connect().close()
        return True

    def execute(self, sql: str) -> None:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def create_database(self, name: str) -> str:
        self.execute('CREATE DATABASE `%s` CHARACTER SET utf8mb4' % name)
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        self.execute('DROP DATABASE IF EXISTS `%s`' % name)

    def _stop(self) -> None:
        if self.process is not None:
            # SIGTERM is mariadbd's normal shutdown.
            kill_group(self.process, signal.SIGTERM, timeout=30)


# RabbitMQ -------------------------------------------------------------------

class RabbitMQServer(_Server):
    """A private RabbitMQ node on 127.0.0.1:<free port>.

    The node has its own name, AMQP port, Erlang distribution port and
    epmd port (so its epmd is private too and can be killed on stop), its
    own mnesia and log directories, no plugins and a config file that binds
    AMQP to the loopback. It runs the server script from the rabbitmq lib
    directory directly, bypassing Debian's /usr/sbin wrapper, which would
    switch to the rabbitmq user and log to /var/log. ``url`` is a
    ``rabbit://`` transport URL for the ``guest`` user, which RabbitMQ
    allows on the loopback.
    """

    PACKAGE = 'rabbitmq-server'
    LIB_BIN = '/usr/lib/rabbitmq/bin'

    #: How many virtual hosts one ``rabbitmqctl`` run adds to the pool
    #: when :meth:`create_vhost` finds it empty.
    VHOST_BATCH = 8

    #: The Erlang distribution's tick time (seconds; None: Erlang's 60).
    #: RabbitMQ 3.10 checks each vhost every ``net_ticktime * 4``
    #: *milliseconds* (240 ms by default): 32 idle vhosts cost the node
    #: 1.4 s of CPU a minute, 0.3 s at 600. The node talks only to
    #: rabbitmqctl, whose commands here last seconds, so it never relies
    #: on ticks to find a peer gone.
    NET_TICKTIME: int | None = 600

    def __init__(self, base_dir: str | None = None, start_timeout=90.0,
                 vhosts: int = 0):
        """``vhosts``: how many virtual hosts the node makes at its boot
        for :meth:`create_vhost` to hand out (none: it makes them when
        asked)."""
        super().__init__(base_dir, prefix='cyborg-rabbit-')
        self._boot_vhosts = vhosts
        # Virtual hosts made and not handed out yet; those handed out, by
        # the name they were asked for.
        self._free_vhosts: list[str] = []
        self._vhosts: dict[str, str] = {}
        self._made_vhosts = 0
        self._vhost_lock = threading.Lock()
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.nodename = 'cyborgtest%d@localhost' % self.port
        self.log = os.path.join(self.base_dir, 'rabbitmq-server.log')
        self.start_timeout = start_timeout
        self._server = find_binary('rabbitmq-server', self.PACKAGE,
                                   [self.LIB_BIN])
        self._ctl = find_binary('rabbitmqctl', self.PACKAGE, [self.LIB_BIN])
        self._epmd = find_binary('epmd', 'erlang-base')

    @property
    def url(self) -> str:
        return 'rabbit://guest:guest@%s:%d/' % (LOOPBACK, self.port)

    def create_vhost(self, name: str) -> str:
        """A virtual host of its own for ``name``, usable by guest; its
        transport URL (the same for the same ``name``).

        Services on different vhosts never share queues (the RPC queues
        are named after topics, whatever the exchange). The vhost is one
        the node made before and handed out to nobody else (``pool-N``):
        one ``rabbitmqctl`` run (an Erlang VM start, 0.5 to 0.7 s of CPU)
        makes :data:`VHOST_BATCH` of them, and the node's boot makes the
        first ones with none.
        """
        with self._vhost_lock:
            vhost = self._vhosts.get(name)
            if vhost is None:
                if not self._free_vhosts:
                    self._free_vhosts = self._import_vhosts(self.VHOST_BATCH)
                vhost = self._vhosts[name] = self._free_vhosts.pop(0)
        # The node applies an import after rabbitmqctl returned: it is
        # done when guest can open the vhost.
        wait_for(lambda: self._ready(vhost), 30, 'RabbitMQ vhost %s' % vhost,
                 self.process, self.log, interval=0.05)
        return self.url + vhost

    def _vhost_definitions(self, count: int, boot: bool = False
                           ) -> tuple[str, list[str]]:
        """A definitions file of ``count`` new vhosts with guest's
        permissions on them; its path and the vhosts. ``boot``: for the
        node's first boot, which then makes neither guest nor ``/``
        itself, so the file has both as the node would make them."""
        names = ['pool-%d' % n for n in range(self._made_vhosts,
                                              self._made_vhosts + count)]
        self._made_vhosts += count
        definitions: dict[str, list[dict]] = {'users': []}
        if boot:
            definitions['users'].append(_rabbitmq_user('guest', 'guest'))
            names.insert(0, '/')
        definitions['vhosts'] = [{'name': name} for name in names]
        definitions['permissions'] = [
            {'user': 'guest', 'vhost': name, 'configure': '.*',
             'write': '.*', 'read': '.*'} for name in names]
        path = os.path.join(self.base_dir, 'vhosts-%d.json'
                            % self._made_vhosts)
        with open(path, 'w') as f:
            json.dump(definitions, f)
        return path, names[1:] if boot else names

    def _import_vhosts(self, count: int) -> list[str]:
        path, names = self._vhost_definitions(count)
        result = self.rabbitmqctl('import_definitions', path)
        if result.returncode != 0:
            raise ServerError('rabbitmqctl import_definitions failed: %s%s'
                              % (result.stdout, result.stderr))
        return names

    def env(self) -> dict[str, str]:
        """Environment of the node and of rabbitmqctl talking to it."""
        base = self.base_dir
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(('RABBITMQ_', 'ERL_'))}
        env.update({
            'HOME': base,  # the Erlang cookie goes here
            'RABBITMQ_NODENAME': self.nodename,
            'RABBITMQ_NODE_IP_ADDRESS': LOOPBACK,
            'RABBITMQ_NODE_PORT': str(self.port),
            'RABBITMQ_DIST_PORT': str(self.dist_port),
            'ERL_EPMD_PORT': str(self.epmd_port),
            'ERL_EPMD_ADDRESS': LOOPBACK,
            'RABBITMQ_MNESIA_BASE': os.path.join(base, 'mnesia'),
            'RABBITMQ_LOG_BASE': os.path.join(base, 'log'),
            'RABBITMQ_LOGS': os.path.join(base, 'log', 'rabbit.log'),
            'RABBITMQ_PID_FILE': os.path.join(base, 'rabbit.pid'),
            'RABBITMQ_ENABLED_PLUGINS_FILE': os.path.join(base,
                                                          'enabled_plugins'),
            'RABBITMQ_PLUGINS_EXPAND_DIR': os.path.join(base, 'plugins'),
            'RABBITMQ_CONFIG_FILE': os.path.join(base, 'rabbitmq.conf'),
            'RABBITMQ_ADVANCED_CONFIG_FILE': os.path.join(base,
                                                          'advanced.config'),
            'RABBITMQ_CONF_ENV_FILE': os.path.join(base, 'rabbitmq-env.conf'),
            'RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS':
                '-kernel inet_dist_use_interface {127,0,0,1}',
        })
        return env

    def _write_files(self) -> None:
        base = self.base_dir
        for sub in ('mnesia', 'log', 'plugins'):
            os.makedirs(os.path.join(base, sub), exist_ok=True)
        files = {
            'enabled_plugins': '[].\n',
            'advanced.config': (
                '[{kernel, [{net_ticktime, %d}]}].\n' % self.NET_TICKTIME
                if self.NET_TICKTIME else '[].\n'),
            'rabbitmq-env.conf': '',
            'rabbitmq.conf': (
                'listeners.tcp.default = %s:%d\n'
                'loopback_users.guest = true\n'
                'log.console = false\n'
                'log.file.level = warning\n'
                # A test host may have little free disk or memory; the
                # node must not block publishers because of it.
                'disk_free_limit.absolute = 1\n'
                'vm_memory_high_watermark.relative = 0.9\n'
                % (LOOPBACK, self.port)),
        }
        if self._boot_vhosts and not self._made_vhosts:
            # Made at the first boot (definitions the node imports before
            # it opens its listener); a restart keeps them in mnesia.
            path, self._free_vhosts = self._vhost_definitions(
                self._boot_vhosts, boot=True)
            files['rabbitmq.conf'] += 'load_definitions = %s\n' % path
        for name, text in files.items():
            with open(os.path.join(base, name), 'w') as f:
                f.write(text)
        # The Debian wrapper (not used here, but rabbitmqctl may be) can
        # switch to the rabbitmq user: let it write everywhere.
        os.chmod(base, 0o777)
        for root, dirs, _files in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o777)

    def _start(self) -> None:
        self._write_files()
        self.process = spawn([self._server], self.log, env=self.env(),
                             cwd=self.base_dir)
        wait_for(self._ready, self.start_timeout, 'RabbitMQ on port %d'
                 % self.port, self.process, self.log, interval=0.25)

    def _ready(self, vhost: str = '/') -> bool:
        import kombu
        with kombu.Connection('amqp://guest:guest@%s:%d/%s'
                              % (LOOPBACK, self.port, vhost),
                              connect_timeout=2) as conn:
            conn.connect()
            return conn.connected

    def rabbitmqctl(self, *args: str, timeout: float = 60
                    ) -> subprocess.CompletedProcess:
        return subprocess.run([self._ctl, '-n', self.nodename] + list(args),
                              env=self.env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True,
                              timeout=timeout, check=False,
                              cwd=self.base_dir)

    def _stop(self) -> None:
        try:
            if self.process is not None:
                # The Erlang VM shuts the node down on SIGTERM; `rabbitmqctl
                # stop` would start a second VM to ask it (seconds of CPU).
                kill_group(self.process, signal.SIGTERM, timeout=20)
        finally:
            # epmd daemonises out of our process group; it listens on our
            # private port, so stopping it affects no other Erlang node.
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run([self._epmd, '-port', str(self.epmd_port),
                                '-kill'], env=self.env(),
                               stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10,
                               check=False)


def _rabbitmq_user(name: str, password: str) -> dict:
    """A RabbitMQ definitions entry of an administrator ``name``: its
    password hashed as RabbitMQ does by default (a 4-byte salt, then
    SHA-256 of salt and password; base64)."""
    salt = os.urandom(4)
    digest = hashlib.sha256(salt + password.encode()).digest()
    return {'name': name,
            'password_hash': base64.b64encode(salt + digest).decode(),
            'hashing_algorithm': 'rabbit_password_hashing_sha256',
            'tags': ['administrator']}


# Cyborg services -------------------------------------------------------------

def write_config(path: str, sections: Mapping[str, Mapping[str, object]]
                 ) -> str:
    """Write an oslo.config INI file from ``{section: {option: value}}``."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    for section, options in sections.items():
        if section != 'DEFAULT':
            parser.add_section(section)
        for key, value in options.items():
            parser.set(section, key, str(value))
    with open(path, 'w') as f:
        parser.write(f)
    return path


class CyborgProcess:
    """One cyborg console script running with a generated config file.

    ``config`` is ``{section: {option: value}}``; its output (the service
    log) goes to ``<work_dir>/<name>.log``. :meth:`stop` sends SIGTERM to
    the process group and waits, then SIGKILLs what is left. ``env``
    replaces entries of the test's environment (e.g. ``PATH``, for a
    process that must find fake vendor commands only).
    """

    def __init__(self, script: str, config: Mapping[str, Mapping] | None,
                 work_dir: str, args: Sequence[str] = (),
                 name: str | None = None,
                 env: Mapping[str, str] | None = None):
        self.script = script
        self.env = dict(env or {})
        self.name = name or script
        self.work_dir = work_dir
        os.makedirs(work_dir, exist_ok=True)
        self.log = os.path.join(work_dir, self.name + '.log')
        self.config_file = None
        if config is not None:
            self.config_file = write_config(
                os.path.join(work_dir, self.name + '.conf'), config)
        self.args = list(args)
        self.process: Process | None = None

    @property
    def argv(self) -> list[str]:
        argv = [venv_script(self.script)]
        if self.config_file:
            argv += ['--config-file', self.config_file]
        return argv + self.args

    def start(self) -> CyborgProcess:
        env = dict(os.environ, PYTHONUNBUFFERED='1', **self.env)
        self.process = spawn(self.argv, self.log, env=env, cwd=self.work_dir)
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; the exit code."""
        if self.process is None:
            return None
        kill_group(self.process, signal.SIGTERM, timeout)
        return self.process.returncode

    def terminate(self) -> None:
        """SIGTERM to the process group, without waiting for it."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def wait_log(self, text: str, timeout: float = 60.0) -> None:
        """Wait until ``text`` appears in the log."""
        def seen():
            with open(self.log, errors='replace') as f:
                return text in f.read()
        wait_for(seen, timeout, '%s to log %r' % (self.name, text),
                 self.process, self.log)

    def wait_http(self, url: str, timeout: float = 60.0) -> None:
        """Wait until ``url`` answers HTTP at all (any status)."""
        import requests

        def answers():
            requests.get(url, timeout=2)
            return True
        wait_for(answers, timeout, '%s at %s' % (self.name, url),
                 self.process, self.log)

    def log_text(self) -> str:
        with open(self.log, errors='replace') as f:
            return f.read()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info):
        self.stop()


def run_script(script: str, *args: str, config_file: str | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a cyborg console script to completion, capturing its output."""
    argv = [venv_script(script)]
    if config_file:
        argv += ['--config-file', config_file]
    return run(argv + list(args), timeout=timeout)


def database_name(url: str) -> str:
    """The database a SQLAlchemy URL names."""
    import sqlalchemy as sa
    name = sa.engine.make_url(url).database
    assert name, url
    return name


def _dbsync_upgrade(config_file: str) -> None:
    result = run_script('cyborg-dbsync', 'upgrade', config_file=config_file,
                        timeout=300)
    if result.returncode != 0:
        raise ServerError('cyborg-dbsync upgrade failed:\n%s%s'
                          % (result.stdout, result.stderr))


def upgrade_cyborg_database(config_file: str, db_server=None) -> None:
    """``cyborg-dbsync upgrade`` of the empty database ``config_file``
    names. When ``db_server``, the server holding it, is a
    :class:`PostgreSQLServer`, this tree's schema is built once per test
    run and restored from its dump instead (:meth:`~PostgreSQLServer.
    load_schema`). The migrations themselves are tested as an operator
    runs them in test_migrations.py."""
    if not isinstance(db_server, PostgreSQLServer):
        _dbsync_upgrade(config_file)
        return
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(config_file)
    url = parser.get('database', 'connection')

    def build(schema_url: str) -> None:  # in the dump's own database
        _dbsync_upgrade(write_config(
            '%s.schema-%s' % (config_file, database_name(schema_url)),
            {'database': {'connection': schema_url}}))
    db_server.load_schema(database_name(url), 'cyborg', build)


def start_control_plane(directory: str, config_file: str, port: int,
                        processes: list, timeout: float = 90.0) -> str:
    """Start cyborg-conductor, then cyborg-api on ``port``; the API URL.

    Both use ``config_file``; they are appended to ``processes`` as they
    start, so the caller stops whatever did start if this fails.
    """
    conductor = CyborgProcess('cyborg-conductor', None, directory,
                              args=['--config-file', config_file]).start()
    processes.append(conductor)
    conductor.wait_log('Started cyborg-conductor', timeout)
    api = CyborgProcess('cyborg-api', None, directory,
                        args=['--config-file', config_file]).start()
    processes.append(api)
    url = 'http://%s:%d' % (LOOPBACK, port)
    api.wait_http(url + '/', timeout)
    return url
