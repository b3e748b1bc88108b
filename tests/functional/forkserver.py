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

"""A fork server that starts the suite's Python processes pre-imported.

The functional tests start several hundred Python processes: cyborg's
services and commands, Placement, the ``openstack`` CLI. Each spent 1.5
to 2.5 s of CPU importing the same libraries (SQLAlchemy, oslo.*,
pecan, openstacksdk...) before its first line of work, on a 2-core
machine where the suite is CPU-bound. This server imports those
libraries once, then forks a child for each process to start; the child
becomes the process asked for (its own session, standard streams,
working directory, environment, ``sys.argv`` and ``sys.path``) and runs
the console script, ``-c`` code or ``-m`` module as the interpreter
would, exiting through the interpreter's own shutdown. The server also
reads stevedore's table of the installed entry points once, for every
child whose ``sys.path`` adds no distribution (see
:func:`_entry_points_table`).

What is preloaded is third-party code only, never cyborg's own modules
(they read the environment at import: ``PROMETHEUS_MULTIPROC_DIR``, for
one) and never a library that reads the environment at import in a way
the child could not redo. Only processes that do not use eventlet's
monkey patching are forked (Nova's services are started as before).
Setting ``CYBORG_TEST_FORKSERVER=0`` starts every process with a fresh
interpreter, to rule the fork server out when a test behaves
differently under it.

The server is one per pytest process, started at the first eligible
start and stopped when that process exits (or dies: it asks the kernel
for SIGTERM at its parent's death). A child is not a child of the test
process, so :class:`ForkedProcess` gives the part of
:class:`subprocess.Popen` the fixtures use, the exit status relayed by
the server.
"""

from __future__ import annotations

import atexit
from collections.abc import Mapping
from collections.abc import Sequence
import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings

ENABLE_ENV = 'CYBORG_TEST_FORKSERVER'

# What the processes started through a server import at start, in an
# order that imports each library's dependencies first, per profile: one
# server for the ``openstack`` CLI, one for everything else. openstacksdk
# imports prometheus_client, which cyborg's services must import
# themselves (see NEVER_PRELOADED).
PRELOAD = {
    'service': (
        # cyborg's package alone: it makes oslo.service's default backend
        # threads before oslo.messaging imports oslo.service.
        'cyborg',
        'sqlalchemy', 'sqlalchemy.orm', 'sqlalchemy.dialects.postgresql',
        'sqlalchemy.dialects.mysql', 'sqlalchemy.dialects.sqlite',
        'psycopg2', 'pymysql', 'alembic', 'alembic.config',
        'oslo_config.cfg', 'oslo_log.log', 'oslo_i18n',
        'oslo_utils.timeutils', 'oslo_serialization.jsonutils',
        'oslo_concurrency.lockutils', 'oslo_messaging',
        'oslo_messaging.rpc', 'oslo_messaging.notify',
        'oslo_messaging._drivers.impl_rabbit',
        'oslo_db.sqlalchemy.enginefacade', 'oslo_db.sqlalchemy.utils',
        'oslo_policy.policy', 'oslo_middleware',
        'oslo_reports.guru_meditation_report',
        'oslo_upgradecheck.upgradecheck', 'pecan', 'webob',
        'keystonemiddleware.auth_token', 'keystoneauth1.session',
        'keystoneauth1.loading', 'stevedore', 'jsonschema', 'requests',
        'os_traits', 'os_resource_classes', 'cotyledon', 'futurist',
        'placement.wsgi',
    ),
    'cli': (
        'openstack', 'openstackclient.shell', 'cliff.app', 'osc_lib.shell',
        'keystoneauth1.session', 'keystoneauth1.loading', 'requests',
    ),
    # keystone-manage (the test Keystone's set-up): 3.5 s of imports at
    # each run, SAML's libraries the most.
    'keystone': ('keystone.cmd.manage',),
}

# Modules a preload must not bring in: they decide something from the
# environment at import (cyborg's metrics and prometheus_client's value
# class from PROMETHEUS_MULTIPROC_DIR), which each child must do itself.
# Of cyborg only the package itself is preloaded.
NEVER_PRELOADED = {'service': ('cyborg.', 'prometheus_client'),
                   'cli': ('cyborg.',), 'keystone': ('cyborg.',)}

# Console scripts of the venv that are started through a server (the
# ones with a start worth saving and no eventlet monkey patching), and
# the server's profile; cyborg's own (FORKED_SCRIPT_PREFIXES) go to the
# service one.
FORKED_SCRIPTS = {'openstack': 'cli', 'placement-manage': 'service',
                  'keystone-manage': 'keystone'}
FORKED_SCRIPT_PREFIXES = ('cyborg-',)

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Python files of the suite run as ``python FILE``, and their profiles.
FORKED_FILES = {os.path.join(_TESTS, 'compat', 'cyborgclient_osc.py'): 'cli'}
# So are the benchmarks (tools/bench/*.py), on the service profile.
BENCH_DIR = os.path.join(os.path.dirname(_TESTS), 'tools', 'bench')


def _file_profile(path: str) -> str | None:
    """The profile of a Python file run as ``python FILE``; None if it
    starts fresh."""
    if path in FORKED_FILES:
        return FORKED_FILES[path]
    if os.path.dirname(path) == BENCH_DIR and path.endswith('.py'):
        return 'service'
    return None


# The server side -----------------------------------------------------------

def _preload(profile: str) -> None:
    # cyborg's console scripts set this before eventlet is imported (see
    # cyborg.common.eventlet_unused); eventlet reads it at import.
    os.environ.setdefault('EVENTLET_NO_GREENDNS', 'yes')
    for name in PRELOAD[profile]:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if profile == 'cli':
        _import_cli_commands()
    leaked = [name for name in sys.modules
              if name.startswith(NEVER_PRELOADED[profile])]
    if leaked:
        raise RuntimeError('the preload imported %s' % ', '.join(leaked))


def _import_cli_commands() -> None:
    """The modules of the CLI's commands and plugins: the CLI loads them
    all at each start to build its command table."""
    from importlib import metadata
    modules = {entry_point.module
               for distribution in metadata.distributions()
               for entry_point in distribution.entry_points
               if entry_point.group.startswith('openstack.')}
    for module in sorted(modules):
        with contextlib.suppress(Exception):
            importlib.import_module(module)


def _entry_points_table() -> dict | None:
    """stevedore's table of the installed entry points, read once in the
    server for its children (None when stevedore's cache is not what
    :func:`_share_entry_points` expects).

    stevedore keeps the table per ``sys.path``, in the process and in a
    file, and reads every installed distribution's entry points for a
    ``sys.path`` it has not seen: 0.2 to 0.5 s of CPU here. A child's
    ``sys.path`` differs from the server's in its first entries, so each
    child would read them again (its file is not written when the
    interpreter lives under /tmp, as a CI checkout may, and a child
    started as ``-m`` in a test's own directory has a path of its own).
    """
    try:
        from stevedore import _cache
        internal = _cache._c._internal  # the child adds to it
        table = _cache._c._get_data_for_path(None)
        if not (isinstance(internal, dict) and isinstance(table, dict)):
            return None
        _write_console_scripts_table(_cache, table)
    except Exception:  # another stevedore: the children read their own
        return None
    return table


def _write_console_scripts_table(cache, table: dict) -> None:
    """Write stevedore's file of the entry point table for the
    ``sys.path`` the virtualenv's console scripts start with, unless it
    is there: the ones started fresh (Nova's services) read it then.

    stevedore writes it itself, but not when the interpreter is under
    /tmp; it reads it wherever the interpreter is.
    """
    directory = cache._c._dir
    if os.path.isfile(os.path.join(directory, '.disable')):
        return
    # As a console script started with this environment has it: the
    # server's own, but for the first entry.
    path = (os.path.dirname(sys.executable),) + tuple(sys.path[1:])
    digest, path_values = cache._hash_settings_for_path(path)
    filename = os.path.join(directory, digest)
    if os.path.exists(filename):
        return
    os.makedirs(directory, exist_ok=True)
    cache._write_cache_file(filename, dict(table, path_values=path_values))


def _holds_distributions(entry: str) -> bool:
    """Whether the ``sys.path`` entry ``entry`` may hold installed
    distributions (entry points of its own)."""
    if not os.path.isdir(entry or '.'):
        return os.path.exists(entry)  # a zip or egg file
    with contextlib.suppress(OSError):
        return any(name.endswith(('.dist-info', '.egg-info'))
                   for name in os.listdir(entry or '.'))
    return True


def _share_entry_points(table: dict | None, server_path: list[str]) -> None:
    """Give the child the server's entry point table for its own
    ``sys.path`` when its entries beyond the server's hold no
    distribution (the table is then the one it would read)."""
    if table is None:
        return
    extra = [entry for entry in sys.path if entry not in server_path]
    if any(_holds_distributions(entry) for entry in extra):
        return
    from stevedore import _cache
    _cache._c._internal[tuple(sys.path)] = table


def _pythonpath(env: Mapping[str, str]) -> list[str]:
    return [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]


def _base_path() -> list[str]:
    """The server's ``sys.path`` without its first entry and its
    PYTHONPATH: what every start of this interpreter has."""
    return sys.path[1 + len(_pythonpath(os.environ)):]


def _become(request: dict, fds: list[int],
            entry_points: dict | None = None) -> None:
    """In the forked child: take the identity the request asks for
    (``entry_points``: the server's, see :func:`_entry_points_table`)."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request['cwd'])
    env = request['env']
    base_path = _base_path()
    warning_options = env.get('PYTHONWARNINGS')
    if warning_options and warning_options != os.environ.get(
            'PYTHONWARNINGS'):
        # As the interpreter reads them at start: before the defaults.
        warnings._processoptions(warning_options.split(','))
    os.environ.clear()
    os.environ.update(env)
    kind, target = request['kind'], request['target']
    # sys.path[0] as the interpreter sets it for each kind of start.
    first = {'script': os.path.dirname(os.path.abspath(target)),
             'code': '', 'module': os.getcwd()}[kind]
    server_path = list(sys.path)
    sys.path[:] = [first] + _pythonpath(env) + base_path
    sys.argv[:] = list(request['argv'])
    _share_entry_points(entry_points, server_path)


def _set_parent_death_signal() -> None:
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def serve(path: str, profile: str) -> dict:
    """Serve start requests on the Unix socket ``path`` until stopped,
    with the libraries of ``profile`` (a key of :data:`PRELOAD`) loaded.

    Returns only in a forked child, with the request it is to run.
    """
    _set_parent_death_signal()
    _preload(profile)
    entry_points = _entry_points_table()
    # What the preload made lives as long as the server and its children:
    # kept out of the collector's way, the children neither scan nor touch
    # (and so copy) its pages, and their interpreter shutdown is quicker.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: pid, conn
    print('ready', flush=True)
    while True:
        for key, _events in selector.select():
            if key.fileobj is listener:
                child = _accept(listener, selector, children,
                                entry_points)
                if child is not None:
                    return child
            else:
                _reap(key.fd, selector, children)


def _accept(listener, selector, children,
            entry_points: dict | None = None) -> dict | None:
    conn, _address = listener.accept()
    message, fds, _flags, _address = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    if threading.active_count() != 1:  # a fork would lose their locks
        conn.send(json.dumps({'error': 'threads running'}).encode())
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        # The server's descriptors, closed through the objects that own
        # them: closed by number, an object collected later (the
        # selector is in a reference cycle) would close its number again,
        # by then another file's (runpy's script: EBADF).
        selector.close()
        listener.close()
        conn.close()
        for pidfd, (_pid, child_conn) in children.items():
            os.close(pidfd)
            child_conn.close()
        _become(request, fds, entry_points)
        return request
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pidfd] = (pid, conn)
    selector.register(pidfd, selectors.EVENT_READ)
    conn.send(json.dumps({'pid': pid}).encode())
    return None


def _reap(pidfd: int, selector, children) -> None:
    pid, conn = children.pop(pidfd)
    selector.unregister(pidfd)
    os.close(pidfd)
    _pid, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        conn.send(json.dumps(
            {'returncode': os.waitstatus_to_exitcode(status)}).encode())
    conn.close()


def run_request(request: dict) -> None:
    """Run what the child was asked to, as ``python <argv>`` would."""
    import runpy
    import types
    kind, target = request['kind'], request['target']
    if kind == 'script':
        runpy.run_path(target, run_name='__main__')
    elif kind == 'module':
        runpy.run_module(target, run_name='__main__', alter_sys=True)
    else:
        main = types.ModuleType('__main__')
        sys.modules['__main__'] = main
        exec(compile(target, '<string>', 'exec'), main.__dict__)


# The client side -----------------------------------------------------------

def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, '1') != '0'


def _script_interpreter(path: str) -> str | None:
    try:
        with open(path, 'rb') as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b'#!'):
        return None
    return first[2:].strip().decode(errors='replace')


def _is_this_python(path: str) -> bool:
    """Whether ``path`` names this virtual environment's interpreter."""
    return (os.path.dirname(path) == os.path.dirname(sys.executable)
            and os.path.basename(path) in ('python', 'python3',
                                           'python3.%d' % sys.version_info[1]))


def request_for(argv: Sequence[str]) -> dict | None:
    """How the server would start ``argv``, or None if it would not."""
    if not argv:
        return None
    program = argv[0]
    if _is_this_python(program) and len(argv) >= 2:
        path = os.path.abspath(argv[1])
        profile = _file_profile(path)
        if profile is not None:
            return {'kind': 'script', 'target': path,
                    'argv': [path] + list(argv[2:]), 'profile': profile}
    if _is_this_python(program) and len(argv) >= 3:
        if argv[1] == '-c':
            return {'kind': 'code', 'target': argv[2],
                    'argv': ['-c'] + list(argv[3:]), 'profile': 'service'}
        if argv[1] == '-m' and argv[2].startswith('cyborg.'):
            return {'kind': 'module', 'target': argv[2],
                    'argv': [argv[2]] + list(argv[3:]),
                    'profile': 'service'}
        return None
    name = os.path.basename(program)
    if not (name in FORKED_SCRIPTS
            or name.startswith(FORKED_SCRIPT_PREFIXES)):
        return None
    if (os.path.dirname(os.path.abspath(program))
            != os.path.dirname(sys.executable)
            or not _is_this_python(_script_interpreter(program) or '')):
        return None
    return {'kind': 'script', 'target': program, 'argv': list(argv),
            'profile': FORKED_SCRIPTS.get(name, 'service')}


class ForkServer:
    """The client of one server process (started on first use)."""

    def __init__(self, profile: str):
        self.profile = profile
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._directory: str | None = None
        self.path: str | None = None

    def _start(self) -> None:
        self._directory = tempfile.mkdtemp(prefix='cyborg-fork-')
        self.path = os.path.join(self._directory, 'socket')
        root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONUNBUFFERED='1')
        self._process = subprocess.Popen(
            [sys.executable, '-m', 'tests.functional.forkserver', self.path,
             self.profile],
            cwd=root, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=None)
        line = self._process.stdout.readline()
        if line.strip() != b'ready':
            self.stop()
            raise RuntimeError('the fork server did not start')
        atexit.register(self.stop)

    def stop(self) -> None:
        with self._lock:
            if self._process is not None:
                self._process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(10)
                if self._process.poll() is None:
                    self._process.kill()
                    self._process.wait()
                self._process.stdout.close()
                self._process = None
            if self._directory is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                    os.rmdir(self._directory)
                self._directory = None

    def socket_path(self) -> str:
        """The server's socket (the server started if it is not)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            return self.path

    def start(self, request: dict, env: Mapping[str, str], cwd: str,
              stdio: Sequence[int], args: Sequence[str]) -> ForkedProcess:
        """Start the process ``request`` describes with ``stdio`` as its
        stdin, stdout and stderr."""
        return start_at(self.socket_path(), request, env, cwd, stdio, args)


def start_at(path: str, request: dict, env: Mapping[str, str], cwd: str,
             stdio: Sequence[int], args: Sequence[str]) -> ForkedProcess:
    """Ask the server listening on ``path`` to start the process
    ``request`` describes with ``stdio`` as its stdin, stdout and
    stderr."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        message = dict(request, env=dict(env), cwd=cwd)
        socket.send_fds(conn, [json.dumps(message).encode()], list(stdio))
        answer = json.loads(conn.recv(4096))
    except BaseException:
        conn.close()
        raise
    if 'pid' not in answer:
        conn.close()
        raise RuntimeError('the fork server refused: %s' % answer)
    return ForkedProcess(conn, answer['pid'], list(args))


class ForkedProcess:
    """The part of :class:`subprocess.Popen` the fixtures use, for a
    process the fork server started (its exit status comes from the
    server, which is its parent)."""

    def __init__(self, conn: socket.socket, pid: int, args: list[str]):
        self._conn = conn
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def _collect(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        selector = selectors.DefaultSelector()
        with selector:
            selector.register(self._conn, selectors.EVENT_READ)
            if not selector.select(timeout):
                return False
        message = self._conn.recv(4096)
        self._conn.close()
        # An empty message: the server ended first; the status is lost.
        self.returncode = (json.loads(message)['returncode']
                           if message else -signal.SIGKILL)
        return True

    def poll(self) -> int | None:
        self._collect(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._collect(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_SERVERS = {profile: ForkServer(profile) for profile in PRELOAD}


def shim_directory(bin_dir: str, directory: str,
                   profiles: Sequence[str] = ('cli', 'service')) -> str:
    """``directory``, made to stand in for the virtualenv's ``bin_dir``
    in a shell's ``PATH``: each console script the server of one of
    ``profiles`` would start is a shim that asks it to
    (``forkclient.py``), every other name a link to the script. With the
    fork server off, ``bin_dir`` itself."""
    if not enabled():
        return bin_dir
    client = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          'forkclient.py')
    os.makedirs(directory, exist_ok=True)
    for name in sorted(os.listdir(bin_dir)):
        script = os.path.join(bin_dir, name)
        target = os.path.join(directory, name)
        request = request_for([script])
        if (request is None or request['kind'] != 'script'
                or request['profile'] not in profiles):
            os.symlink(script, target)
            continue
        with open(target, 'w') as f:
            f.write('#!/bin/sh\nexec %s -I -S %s %s %s "$@"\n' % (
                sys.executable, client,
                _SERVERS[request['profile']].socket_path(), script))
        os.chmod(target, 0o755)
    return directory


def popen(argv: Sequence[str], stdout: int, stderr: int,
          env: Mapping[str, str] | None = None, cwd: str | None = None
          ) -> ForkedProcess | None:
    """Start ``argv`` through the fork server (stdin from /dev/null, in a
    new session), or None where it is not to be forked."""
    request = request_for(argv)
    if request is None or not enabled():
        return None
    with open(os.devnull, 'rb') as devnull:
        return _SERVERS[request['profile']].start(
            request, os.environ if env is None else env,
            cwd or os.getcwd(), (devnull.fileno(), stdout, stderr), argv)


def run(argv: Sequence[str], env: Mapping[str, str] | None = None,
        cwd: str | None = None, timeout: float | None = None
        ) -> subprocess.CompletedProcess | None:
    """:func:`subprocess.run` with ``capture_output=True, text=True`` and
    stdin from /dev/null, through the fork server; None where ``argv`` is
    not to be forked."""
    if request_for(argv) is None or not enabled():
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        process = popen(argv, out_w, err_w, env=env, cwd=cwd)
    finally:
        os.close(out_w)
        os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = None if timeout is None else time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = (None if deadline is None
                    else max(0.0, deadline - time.monotonic()))
            ready = selector.select(left)
            if not ready:
                process.kill()
                process.wait()
                for fd in chunks:
                    os.close(fd)
                raise subprocess.TimeoutExpired(list(argv), timeout)
            for key, _events in ready:
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    for fd in chunks:
        os.close(fd)
    returncode = process.wait(
        None if deadline is None else max(0.0, deadline - time.monotonic()))
    return subprocess.CompletedProcess(
        list(argv), returncode,
        b''.join(chunks[out_r]).decode(errors='replace'),
        b''.join(chunks[err_r]).decode(errors='replace'))


if __name__ == '__main__':
    run_request(serve(sys.argv[1], sys.argv[2]))
