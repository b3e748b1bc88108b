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

"""A small client of Nova's server external events API.

Cyborg tells Nova that the binding of an accelerator request (ARQ) is
resolved by posting an ``accelerator-request-bound`` event (compute API
microversion :data:`NOVA_MICROVERSION`, 2.82)::

    POST /os-server-external-events
    {"events": [{"name": "accelerator-request-bound",
                 "server_uuid": <instance uuid>, "tag": <ARQ uuid>,
                 "status": "completed" | "failed"}]}

:meth:`NovaClient.send_events` sends many events in one request and says,
for each event, whether it was delivered, must be retried or was refused
for good; it raises nothing. :class:`LoggingNovaClient` has the same
interface and only logs: the all-in-one uses it when no Nova is configured.
"""

from __future__ import annotations

from collections.abc import Iterable
import re
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_context import context as oslo_context
from oslo_log import log as logging

from cyborg.clients import ksa
from cyborg.domain import events

LOG = logging.getLogger(__name__)

NOVA_MICROVERSION = '2.82'
SERVICE_TYPE = 'compute'
CONF_GROUP = 'nova'
EVENTS_PATH = '/os-server-external-events'
EVENT_NAME = events.EVENT_NAME
STATUSES = events.STATUSES

# Per-event outcomes of NovaClient.send_events.
SENT = 'sent'
RETRY = 'retry'
REJECTED = 'rejected'
# Per-event 422: the instance has no host yet. Nova's conductor binds ARQs
# before it hands the instance to a compute host, so an event sent at once
# usually meets this; it is taken once the host is set.
UNHOSTED = 'unhosted'

# Per-event codes of a 207 answer that will never change on a retry:
# 400 bad event, 404 instance not found.
_REJECTED_CODES = (400, 404)
_UNHOSTED_CODE = 422
# Request-level 4xx that are transient by definition.
_TRANSIENT_4XX = (408, 429)
_BODY_LOG_LIMIT = 1000


class NovaNotConfigured(ValueError):
    """The [nova] group says neither how to authenticate nor where to go."""


class EventResult(str):
    """An outcome (:data:`SENT`, :data:`RETRY`, :data:`UNHOSTED` or
    :data:`REJECTED`).

    A plain string for every comparison, plus ``detail``: why an event was
    not sent (e.g. ``'HTTP 503: ...'``), None when it was.
    """

    detail: str | None

    def __new__(cls, outcome: str, detail: str | None = None):
        result = super().__new__(cls, outcome)
        result.detail = detail
        return result


def make_event(arq_uuid: str, instance_uuid: str, status: str
               ) -> dict[str, str]:
    """The Nova event telling ``instance_uuid`` that ARQ ``arq_uuid`` is
    bound (``status='completed'``) or failed to bind (``'failed'``)."""
    if status not in STATUSES:
        raise ValueError('status must be one of %s, not %r'
                         % (', '.join(STATUSES), status))
    return {'name': EVENT_NAME, 'server_uuid': instance_uuid,
            'tag': arq_uuid, 'status': status}


def _body_text(response) -> str:
    text = re.sub(r'\s+', ' ', response.text or '').strip()
    return text[:_BODY_LOG_LIMIT]


def _all(events: Iterable[dict[str, Any]], outcome: str,
         detail: str | None = None) -> dict[str, str]:
    result = EventResult(outcome, detail)
    return {event['tag']: result for event in events}


class NovaClient:
    """Nova calls over a keystoneauth1 :class:`Adapter`.

    The adapter carries the session, authentication and endpoint; the
    client is thread-safe as long as the adapter's session is.
    """

    def __init__(self, adapter: ks_adapter.Adapter):
        self._adapter = adapter

    @property
    def adapter(self) -> ks_adapter.Adapter:
        return self._adapter

    @classmethod
    def from_conf(cls, conf, group: str = CONF_GROUP) -> NovaClient:
        """A client configured by the ``[nova]`` group of ``conf``.

        The group must have been registered with
        :func:`cyborg.conf.nova.register_opts`. Raises
        :class:`NovaNotConfigured` if it has neither an ``auth_type`` nor
        an ``endpoint_override``.
        """
        auth = ksa.load_auth(conf, group)
        if auth is None and not conf[group].endpoint_override:
            raise NovaNotConfigured(
                'Nova is not configured: set [%s] auth_type (and its '
                'options) or endpoint_override' % group)
        return cls(ksa.load_adapter(conf, group, auth=auth))

    @classmethod
    def for_endpoint(cls, url: str, token: str = 'admin',
                     timeout: float | None = 10.0) -> NovaClient:
        """A client of a Nova at ``url`` without keystone.

        ``url`` is the compute API root, e.g.
        ``http://127.0.0.1:8774/v2.1``; every request carries
        ``X-Auth-Token: <token>`` (for Nova's noauth2: ``admin`` is an
        admin).
        """
        url = url.rstrip('/')
        auth = token_endpoint.Token(url, token)
        session = ksa.read_environment_once(
            ks_session.Session(auth=auth, timeout=timeout))
        return cls(ks_adapter.Adapter(session, service_type=SERVICE_TYPE,
                                      endpoint_override=url))

    def send_events(self, events: list[dict[str, Any]]) -> dict[str, str]:
        """Post ``events`` in one request; ``{tag: outcome}``.

        Each outcome is an :class:`EventResult`: :data:`SENT` (Nova took
        the event), :data:`RETRY` (Nova unreachable, timed out, 5xx, 408,
        429, or an event Nova answered with an unexpected code),
        :data:`UNHOSTED` (per-event 422: the instance has no host yet) or
        :data:`REJECTED` (Nova refused it; retrying cannot help: per-event
        400/404, every event of a 404, any other 4xx). Tags should be
        unique within one call. Never raises for an HTTP or connection
        failure.
        """
        if not events:
            return {}
        kwargs: dict[str, Any] = {
            'json': {'events': list(events)},
            'microversion': NOVA_MICROVERSION,
            'raise_exc': False,
            'headers': {'Accept': 'application/json'},
        }
        context = oslo_context.get_current()
        global_id = getattr(context, 'global_id', None)
        if global_id:
            kwargs['global_request_id'] = global_id
        try:
            response = self._adapter.post(EVENTS_PATH, **kwargs)
        except ks_exc.ClientException as e:
            LOG.warning('Cannot send %d event(s) to Nova: %s', len(events), e)
            return _all(events, RETRY, str(e) or type(e).__name__)
        return self._outcomes(events, response)

    def _outcomes(self, events: list[dict[str, Any]], response
                  ) -> dict[str, str]:
        status = response.status_code
        if status == 200:
            return _all(events, SENT)
        if status == 207:
            return self._partial(events, response)
        detail = 'HTTP %d: %s' % (status, _body_text(response))
        if status >= 500 or status in _TRANSIENT_4XX:
            LOG.warning('Nova could not take %d event(s), will retry: %s',
                        len(events), detail)
            return _all(events, RETRY, detail)
        if status == 404:
            LOG.warning('Nova knows none of the instances of %d event(s); '
                        'they are dropped: %s', len(events), detail)
        else:
            LOG.error('Nova refused %d event(s); they are dropped: %s',
                      len(events), detail)
        return _all(events, REJECTED, detail)

    def _partial(self, events: list[dict[str, Any]], response
                 ) -> dict[str, str]:
        """Outcomes of a 207: each answered event carries its ``code``."""
        try:
            answered = {event['tag']: event
                        for event in response.json()['events']}
        except (ValueError, KeyError, TypeError) as e:
            detail = 'HTTP 207 without a usable body (%s): %s' % (
                e, _body_text(response))
            LOG.warning('Nova answered %s; will retry', detail)
            return _all(events, RETRY, detail)
        results: dict[str, str] = {}
        for event in events:
            tag = event['tag']
            answer = answered.get(tag)
            code = answer.get('code') if isinstance(answer, dict) else None
            if code == 200:
                results[tag] = EventResult(SENT)
                continue
            detail = 'event code %s for instance %s' % (
                code, event.get('server_uuid'))
            if code == _UNHOSTED_CODE:
                LOG.debug('Nova cannot take event %s (ARQ %s) yet: %s',
                          event.get('name'), tag, detail)
                results[tag] = EventResult(UNHOSTED, detail)
            elif code in _REJECTED_CODES:
                LOG.warning('Nova refused event %s (ARQ %s): %s',
                            event.get('name'), tag, detail)
                results[tag] = EventResult(REJECTED, detail)
            else:
                LOG.warning('Nova did not take event %s (ARQ %s), will '
                            'retry: %s', event.get('name'), tag, detail)
                results[tag] = EventResult(RETRY, detail)
        return results


class LoggingNovaClient:
    """Logs events instead of sending them, and reports them sent.

    For deployments without Nova (the all-in-one without ``[nova]
    auth_type``): the outbox is still drained, so it does not grow.
    """

    def send_events(self, events: list[dict[str, Any]]) -> dict[str, str]:
        for event in events:
            LOG.info('Nova event (not sent, no Nova configured): %(name)s '
                     'server %(server_uuid)s tag %(tag)s status %(status)s',
                     event)
        return _all(events, SENT)


def client_from_conf(conf, group: str = CONF_GROUP
                     ) -> NovaClient | LoggingNovaClient:
    """:class:`NovaClient` from ``[nova]``, or a :class:`LoggingNovaClient`
    when the group has no ``auth_type`` (the all-in-one's choice)."""
    if not conf[group].auth_type:
        return LoggingNovaClient()
    return NovaClient.from_conf(conf, group)
