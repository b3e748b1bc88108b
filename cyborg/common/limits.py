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

"""Limits read from Keystone (unified limits) with oslo.limit, cached.

oslo.limit's :class:`~oslo_limit.limit.Enforcer` finds this service's
endpoint and reads its registered limits and a project's limits; its own
cache keeps them for its whole life and does not remember a project
without limits, so :class:`KeystoneLimits` reads each set in one call and
keeps it ``cache_time`` seconds: a limit changed in Keystone applies
after at most that long, and a check with the limits cached makes no
call at all.
"""

from collections.abc import Callable
import threading
import time
from typing import Any

from keystoneauth1 import exceptions as ksa_exc
from oslo_limit import exception as limit_exc
from oslo_log import log as logging

from cyborg.common import exception

LOG = logging.getLogger(__name__)

# A cache of more projects than this drops the expired ones.
_MAX_PROJECTS = 1000


def _keystone_errors() -> tuple[type[Exception], ...]:
    """What the enforcer may raise when Keystone is unreachable, refuses
    the service's credentials, or has no endpoint for it."""
    # openstacksdk (which oslo.limit's enforcer uses) is imported with
    # the first enforcer, not with the API and the conductor: it is
    # about 0.3 s of their start-up CPU, and limits are off by default.
    import openstack.exceptions
    return (limit_exc.SessionInitError, ksa_exc.ClientException,
            openstack.exceptions.SDKException, ValueError)


def _enforcer() -> Any:
    from oslo_limit import limit
    return limit.Enforcer(_no_usage, cache=False)


def _no_usage(project_id: str | None, resource_names: Any) -> dict[str, int]:
    # Usage is counted by the caller (from the ARQ rows), never by the
    # enforcer.
    return {}


class KeystoneLimits:
    """This service's limits in Keystone, each set kept ``cache_time``
    seconds (0: read for every question)."""

    def __init__(self, cache_time: float,
                 enforcer_factory: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._cache_time = cache_time
        self._factory = enforcer_factory or _enforcer
        self._clock = clock
        self._lock = threading.Lock()
        self._enforcer: Any = None
        # key (None: registered limits; else a project id) ->
        # (read at, {resource name: limit}).
        self._cache: dict[str | None, tuple[float, dict[str, int]]] = {}

    def _read(self, key: str | None) -> dict[str, int]:
        """Read the registered limits (``key`` None) or a project's."""
        try:
            if self._enforcer is None:
                self._enforcer = self._factory()
            if key is None:
                pairs = self._enforcer.get_registered_limits(None)
            else:
                pairs = self._enforcer.get_project_limits(key, None)
        except _keystone_errors() as e:
            # The next question finds the endpoint again.
            self._enforcer = None
            LOG.warning('The limits could not be read from Keystone: %s', e)
            raise exception.QuotaUnavailable(reason=type(e).__name__) from e
        return {name: int(value) for name, value in pairs}

    def _get(self, key: str | None) -> dict[str, int]:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now - cached[0] < self._cache_time:
                return cached[1]
            limits = self._read(key)
            if len(self._cache) > _MAX_PROJECTS:
                self._cache = {k: v for k, v in self._cache.items()
                               if now - v[0] < self._cache_time}
            self._cache[key] = (now, limits)
            return limits

    def registered(self) -> dict[str, int]:
        """The registered (default) limits: {resource name: limit}."""
        return self._get(None)

    def project(self, project_id: str) -> dict[str, int]:
        """``project_id``'s own limits: {resource name: limit}."""
        return self._get(project_id)
