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

"""The signals of the cyborg daemons, handled in this one place.

cyborg-api, cyborg-conductor, cyborg-agent and cyborg-all-in-one call
:func:`install` as soon as their configuration is parsed, start their
work, and block their main thread in :meth:`Signals.wait`:

``SIGHUP``
    The configuration files are read again and the options marked
    *mutable* take their new values (``CONF.mutate_config_files()``; oslo.log
    applies ``debug`` through its mutate hook), then every reloader runs
    (the API's policy rules). Work in flight goes on.
``SIGUSR2``
    oslo.reports writes a Guru Meditation report (every thread's stack,
    the configuration) to the standard error or ``[oslo_reports]
    log_dir``.
``SIGTERM``, ``SIGINT``
    :meth:`Signals.wait` returns; the caller stops taking work and gives
    the work in flight :meth:`Signals.grace` seconds, then calls
    :meth:`Signals.exit`. Before :meth:`Signals.wait` (while the daemon
    starts) and after it returned, such a signal ends the process at once.

oslo.service's launcher is not used: its threading backend runs a service
in worker processes that cotyledon forks and supervises, and restarts
them on SIGHUP, whereas a cyborg daemon is one process whose services
are threads (the all-in-one holds the API, the conductor, the agent and
an in-process RPC transport together). The handlers here only queue the
signal; the main thread acts on it, outside the handler.
"""

from collections.abc import Callable
from collections.abc import Mapping
import logging as std_logging
import os
import queue
import signal
import threading

from oslo_config import cfg
from oslo_log import log as logging
from oslo_reports import guru_meditation_report as gmr
from oslo_reports import opts as gmr_opts
from oslo_reports.models import with_default_views as report_models

from cyborg import version
from cyborg.common import patches

LOG = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNAL = signal.SIGHUP
# Seconds between two checks of the queue; a signal wakes the wait
# earlier (its handler runs in the waiting main thread).
_POLL = 1.0


class _ReportVersion:
    """The version object oslo.reports' Package section asks."""

    def vendor_string(self) -> str:
        return 'OpenStack Foundation'

    def product_string(self) -> str:
        return 'OpenStack Cyborg'

    def version_string_with_package(self) -> str:
        return version.version_string()


def _thread_names() -> report_models.ModelWithDefaultViews:
    """A report section naming each thread the Threads section lists
    by id only (``bind-job_0``, ``conductor-heartbeat``, ...)."""
    names = {'%d' % thread.ident: '%s%s' % (
        thread.name, ' (daemon)' if thread.daemon else '')
        for thread in threading.enumerate() if thread.ident is not None}
    return report_models.ModelWithDefaultViews(names)


def setup_report(name: str, conf: cfg.ConfigOpts) -> None:
    """Write a Guru Meditation report on SIGUSR2 (or when ``[oslo_reports]
    file_event_handler`` changes, where that is set)."""
    gmr_opts.set_defaults(conf)
    if not any(title == 'Thread names' for title, _ in getattr(
            gmr.TextGuruMeditation, 'persistent_sections', ())):
        gmr.TextGuruMeditation.register_section('Thread names',
                                                _thread_names)
    gmr.TextGuruMeditation.setup_autorun(_ReportVersion(), service_name=name,
                                         conf=conf)


def mutate(conf: cfg.ConfigOpts) -> list[str]:
    """Read the configuration files again and apply the mutable options;
    the names (``group.option``) of those that changed, without their
    values (oslo.config logs those).

    oslo.config would only report an invalid new value where the option
    is read, every time, until the next reload: such a change is undone
    and raises, and the configuration stays as it was.
    """
    # oslo.config has no API to undo a mutation (see the patch).
    restore = patches.mutable_config_snapshot(conf)
    try:
        changed = conf.mutate_config_files()
        for group, option in changed:
            # Raises ConfigFileValueError for an invalid value.
            getattr(conf[group] if group else conf, option)
    except Exception:
        restore()
        raise
    return sorted('%s.%s' % (group or 'DEFAULT', option)
                  for group, option in changed)


class Signals:
    """Reload, report and stop signals of one daemon (see the module)."""

    def __init__(self, name: str, conf: cfg.ConfigOpts,
                 reloaders: Mapping[str, Callable[[], None]] | None = None):
        self.name = name
        self._conf = conf
        self._reloaders = dict(reloaders or {})
        # SimpleQueue.put may be called from a signal handler.
        self._pending: queue.SimpleQueue = queue.SimpleQueue()

    def install(self) -> 'Signals':
        """Take over SIGHUP and SIGUSR2; SIGTERM and SIGINT keep their
        default (stop at once) until :meth:`wait`, so that a daemon whose
        start hangs can still be stopped."""
        signal.signal(RELOAD_SIGNAL, self._queue)
        setup_report(self.name, self._conf)
        return self

    def _queue(self, signum: int, _frame) -> None:
        self._pending.put(signum)

    def wait(self) -> int:
        """Block until SIGTERM or SIGINT, reloading on each SIGHUP;
        the stop signal."""
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, self._queue)
        while True:
            try:
                signum = self._pending.get(timeout=_POLL)
            except queue.Empty:
                continue
            if signum == RELOAD_SIGNAL:
                self.reload()
            else:
                break
        for stop_signal in STOP_SIGNALS:
            # A second stop signal ends the process without waiting.
            signal.signal(stop_signal, signal.SIG_DFL)
        LOG.info('%s caught %s: stopping; the work in flight has %ss to '
                 'finish', self.name, signal.Signals(signum).name,
                 self.grace())
        return signum

    def grace(self) -> float:
        """``[DEFAULT] graceful_shutdown_timeout``, as it is now."""
        return self._conf.graceful_shutdown_timeout

    def reload(self) -> list[str]:
        """Apply the mutable options and run the reloaders; logs one INFO
        line and answers what was reloaded."""
        reloaded = []
        try:
            changed = mutate(self._conf)
        except Exception as e:
            LOG.error('%s could not read its configuration files again, '
                      'its configuration is unchanged: %s', self.name, e)
        else:
            reloaded.append('configuration files (mutable options '
                            'changed: %s)' % (', '.join(changed) or 'none'))
        for what, reload in self._reloaders.items():
            try:
                reload()
            except Exception:
                LOG.exception('%s could not reload its %s', self.name, what)
            else:
                reloaded.append(what)
        LOG.info('%s reloaded on SIGHUP: %s', self.name,
                 '; '.join(reloaded) or 'nothing')
        return reloaded

    def exit(self, finished: bool = True) -> int:
        """The exit status (0) once the daemon stopped. When work was
        handed back (``finished`` false) the process ends at once: the
        threads still running that work would hold its exit."""
        LOG.info('%s stopped%s', self.name, '' if finished else
                 '; work in flight was left unfinished')
        if not finished:
            for handler in std_logging.getLogger().handlers:
                handler.flush()
            os._exit(0)
        return 0


def install(name: str, conf: cfg.ConfigOpts,
            reloaders: Mapping[str, Callable[[], None]] | None = None
            ) -> Signals:
    """The signal handling of daemon ``name``, installed."""
    return Signals(name, conf, reloaders).install()
