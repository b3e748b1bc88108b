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

"""A small client of the Placement API.

Every call is made at microversion :data:`PLACEMENT_MICROVERSION` (1.26:
providers are returned on create (1.20), errors carry codes (1.23) and an
inventory may reserve all of its total (1.26)), except
:meth:`PlacementClient.reshape_inventories`, which needs the reshaper
(:data:`RESHAPER_MICROVERSION`, 1.30) and is optional: callers fall back
to :meth:`PlacementClient.set_inventories` when Placement refuses it,
and :meth:`PlacementClient.update_provider`, which needs re-parenting
(:data:`REPARENT_MICROVERSION`, 1.37).

Errors are typed (:class:`PlacementError` and its subclasses) and no 4xx
is swallowed: the only "expected" failures, a 404 from
:meth:`PlacementClient.get_provider` and
:meth:`PlacementClient.delete_provider`, are documented return values.
Nothing is retried here; retrying, e.g. after a
:class:`GenerationConflict`, is the caller's business.
"""

from __future__ import annotations

from collections.abc import Sequence
import re
import threading
import time
from typing import Any
from urllib import parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_context import context as oslo_context

from cyborg.clients import ksa
from cyborg.common import metrics
from cyborg.domain import resource_names

PLACEMENT_MICROVERSION = '1.26'
# POST /reshaper: the inventories of many providers in one request.
RESHAPER_MICROVERSION = '1.30'
# PUT /resource_providers/{uuid} moving a provider to another parent.
REPARENT_MICROVERSION = '1.37'
SERVICE_TYPE = 'placement'
CONF_GROUP = 'placement'

# Error codes of Placement's JSON error responses (placement.errors).
CODE_CONCURRENT_UPDATE = 'placement.concurrent_update'
CODE_DUPLICATE_NAME = 'placement.duplicate_name'
CODE_PROVIDER_IN_USE = 'placement.resource_provider.inuse'
CODE_CANNOT_DELETE_PARENT = 'placement.resource_provider.cannot_delete_parent'
CODE_INVENTORY_IN_USE = 'placement.inventory.inuse'

class PlacementError(Exception):
    """A Placement request failed.

    ``status_code`` is the HTTP status (None when there was no response),
    ``code`` Placement's error code (e.g. ``placement.concurrent_update``),
    ``detail`` Placement's error text and ``request_id`` the id Placement
    logged the request under.
    """

    def __init__(self, message: str, status_code: int | None = None,
                 code: str | None = None, detail: str | None = None,
                 request_id: str | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.detail = detail
        self.request_id = request_id


class PlacementUnavailable(PlacementError):
    """Placement could not be reached, timed out or answered 5xx."""


class GenerationConflict(PlacementError):
    """409 placement.concurrent_update: the provider generation changed."""


class ProviderInUse(PlacementError):
    """409 on delete: the provider has allocations (or children)."""


class ProviderHasChildren(ProviderInUse):
    """409 on delete: the provider is the parent of other providers."""


class ProviderConflict(PlacementError):
    """409 on create: a provider with that name or uuid exists."""


class ProviderNotFound(PlacementError):
    """404 on a call about a provider that does not exist."""


class InventoryInUse(PlacementError):
    """409 on setting inventories: allocations use removed inventory."""


class Forbidden(PlacementError):
    """403 on a reshape: Placement's policy does not allow it."""


class MicroversionUnsupported(PlacementError):
    """406 on a reshape or a re-parenting: Placement is older than the
    microversion it needs (1.30, 1.37)."""


_ERRORS_BY_CODE: dict[str, type[PlacementError]] = {
    CODE_CONCURRENT_UPDATE: GenerationConflict,
    CODE_DUPLICATE_NAME: ProviderConflict,
    CODE_PROVIDER_IN_USE: ProviderInUse,
    CODE_CANNOT_DELETE_PARENT: ProviderHasChildren,
    CODE_INVENTORY_IN_USE: InventoryInUse,
}

# Connection-level failures: Placement may answer later.
_UNAVAILABLE = (ks_exc.ConnectionError, ks_exc.EndpointNotFound,
                ks_exc.DiscoveryFailure)


def _error_text(response) -> tuple[str | None, str]:
    """(code, detail) of a Placement error response."""
    try:
        body = response.json()
        error = body['errors'][0]
        detail = str(error.get('detail') or error.get('title') or '')
        code = error.get('code')
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        code, detail = None, response.text or ''
    return code, re.sub(r'\s+', ' ', detail).strip()


def _quote(value: str) -> str:
    return parse.quote(str(value), safe='')


class PlacementClient:
    """Placement calls over a keystoneauth1 :class:`Adapter`.

    The adapter carries the session, authentication and endpoint; the
    client is thread-safe as long as the adapter's session is.
    """

    def __init__(self, adapter: ks_adapter.Adapter):
        self._adapter = adapter
        self._count_lock = threading.Lock()
        self._request_count = 0

    # Construction ---------------------------------------------------------

    @classmethod
    def from_conf(cls, conf, group: str = CONF_GROUP) -> PlacementClient:
        """A client configured by the ``[placement]`` group of ``conf``.

        The group must have been registered with
        :func:`cyborg.conf.placement.register_opts`.
        """
        return cls(ksa.load_adapter(conf, group))

    @classmethod
    def for_endpoint(cls, url: str, token: str = 'admin',
                     timeout: float | None = 60.0,
                     roles: Sequence[str] | None = None) -> PlacementClient:
        """A client of a Placement at ``url`` without keystone.

        For a Placement running with ``[api] auth_strategy = noauth2``:
        every request carries ``X-Auth-Token: <token>``, which noauth2
        reads as ``<user>[:<project>]``; the user ``admin`` gets the admin
        role. ``roles`` (e.g. ``('admin', 'service')``, what a service
        user's keystone token carries) replaces that with an ``X-Roles``
        header.
        """
        return cls(adapter_from_endpoint(url, token=token, timeout=timeout,
                                         roles=roles))

    # Request plumbing -----------------------------------------------------

    @property
    def request_count(self) -> int:
        """Number of HTTP requests sent (attempted) so far."""
        return self._request_count

    @request_count.setter
    def request_count(self, value: int) -> None:
        with self._count_lock:
            self._request_count = value

    @property
    def adapter(self) -> ks_adapter.Adapter:
        return self._adapter

    def request(self, method: str, path: str, *, json: Any = None,
                microversion: str | None = PLACEMENT_MICROVERSION,
                conflict: type[PlacementError] = PlacementError,
                not_found: type[PlacementError] | None = ProviderNotFound,
                ok_not_found: bool = False):
        """Send one request; the response, or a :class:`PlacementError`.

        Any status >= 400 raises, except 404 when ``ok_not_found`` (the
        caller checks ``status_code``). A 409 without a known error code
        raises ``conflict``; a 404 raises ``not_found`` (the generic
        :class:`PlacementError` when None).
        """
        kwargs: dict[str, Any] = {
            # keystoneauth's own HTTP exceptions would lose Placement's error
            # code; the response is turned into a typed error below instead.
            'raise_exc': False,
            'headers': {'Accept': 'application/json'},
        }
        if microversion is not None:
            kwargs['microversion'] = microversion
        if json is not None:
            kwargs['json'] = json
        context = oslo_context.get_current()
        # The caller's global request id, so that Placement's log lines can be
        # tied to the cyborg request that caused them.
        global_id = getattr(context, 'global_id', None)
        if global_id:
            kwargs['global_request_id'] = global_id
        with self._count_lock:
            self._request_count += 1
        what = '%s %s' % (method, path)
        started = time.monotonic()
        try:
            response = self._adapter.request(path, method, **kwargs)
        except _UNAVAILABLE as e:
            metrics.placement_request(method, 'error',
                                      time.monotonic() - started)
            raise PlacementUnavailable('Placement %s failed: %s' % (what, e))
        except ks_exc.ClientException as e:
            metrics.placement_request(method, 'error',
                                      time.monotonic() - started)
            raise PlacementError('Placement %s failed: %s' % (what, e))
        status = response.status_code
        metrics.placement_request(method, status, time.monotonic() - started)
        if status < 400 or (status == 404 and ok_not_found):
            return response
        code, detail = _error_text(response)
        request_id = response.headers.get('x-openstack-request-id')
        message = 'Placement %s failed with HTTP %d: %s' % (what, status,
                                                            detail)
        # A 5xx is Placement's trouble, not the request's: treated like an
        # unreachable Placement (the host stays pending and is synced again).
        if status >= 500:
            error_class: type[PlacementError] = PlacementUnavailable
        elif status == 409:
            error_class = _ERRORS_BY_CODE.get(code or '', conflict)
        elif status == 404 and not_found is not None:
            error_class = not_found
        else:
            error_class = PlacementError
        raise error_class(message, status_code=status, code=code,
                          detail=detail, request_id=request_id)

    # Providers ------------------------------------------------------------

    def find_provider_by_name(self, name: str) -> dict | None:
        """The provider named ``name``, or None."""
        # No such provider is an empty list; a 404 here is something else
        # and raises a plain PlacementError, not ProviderNotFound (which
        # callers take for a provider gone and retry).
        response = self.request(
            'GET', '/resource_providers?name=%s' % _quote(name),
            not_found=None)
        providers = response.json()['resource_providers']
        return providers[0] if providers else None

    def get_provider(self, uuid: str) -> dict | None:
        """The provider ``uuid``, or None if it does not exist."""
        response = self.request('GET', '/resource_providers/%s'
                                % _quote(uuid), ok_not_found=True)
        if response.status_code == 404:
            return None
        return response.json()

    def create_provider(self, uuid: str, name: str,
                        parent_uuid: str | None = None) -> dict:
        """Create a provider; the new provider (with its generation).

        Raises :class:`ProviderConflict` if the name or uuid is taken.
        """
        body = {'uuid': uuid, 'name': name}
        if parent_uuid is not None:
            body['parent_provider_uuid'] = parent_uuid
        response = self.request('POST', '/resource_providers', json=body,
                                conflict=ProviderConflict, not_found=None)
        return response.json()

    def delete_provider(self, uuid: str) -> bool:
        """Delete a provider; False if it did not exist.

        Raises :class:`ProviderInUse` if it has allocations
        (:class:`ProviderHasChildren` if it has child providers).
        """
        response = self.request('DELETE', '/resource_providers/%s'
                                % _quote(uuid), conflict=ProviderInUse,
                                ok_not_found=True)
        return response.status_code != 404

    def update_provider(self, uuid: str, name: str,
                        parent_uuid: str | None) -> dict:
        """Rename a provider and move it under ``parent_uuid``; the
        provider as updated (with its generation).

        Sent at microversion 1.37 (re-parenting). Raises
        :class:`MicroversionUnsupported` when Placement is older,
        :class:`ProviderConflict` when the name is taken and
        :class:`ProviderNotFound` when the provider is gone.
        """
        try:
            response = self.request(
                'PUT', '/resource_providers/%s' % _quote(uuid),
                json={'name': name, 'parent_provider_uuid': parent_uuid},
                microversion=REPARENT_MICROVERSION,
                conflict=ProviderConflict)
        except PlacementError as e:
            # 406: Placement does not know the microversion asked for. A typed
            # error (a 409, a gone provider) is raised as it is.
            if e.status_code != 406 or type(e) is not PlacementError:
                raise
            raise MicroversionUnsupported(
                str(e), status_code=e.status_code, code=e.code,
                detail=e.detail, request_id=e.request_id) from None
        return response.json()

    def provider_allocations(self, uuid: str) -> dict[str, dict]:
        """The allocations against a provider, by consumer uuid."""
        return self.provider_allocations_at(uuid)[1]

    def provider_allocations_at(self, uuid: str) -> tuple[int, dict]:
        """(provider generation, {consumer uuid: allocation}) of one
        read: an allocation made after it moves the generation."""
        body = self.request('GET', '/resource_providers/%s/allocations'
                            % _quote(uuid)).json()
        return body['resource_provider_generation'], body['allocations']

    def consumer_allocations(self, consumer: str) -> dict[str, dict]:
        """The allocations of ``consumer``, by provider uuid (empty when
        Placement does not know the consumer)."""
        response = self.request('GET', '/allocations/%s' % _quote(consumer),
                                not_found=None)
        return response.json()['allocations']

    def provider_tree(self, root_uuid: str) -> list[dict]:
        """Every provider in the tree of ``root_uuid`` (any member)."""
        response = self.request(
            'GET', '/resource_providers?in_tree=%s' % _quote(root_uuid),
            not_found=None)
        return response.json()['resource_providers']

    # Inventories and traits ----------------------------------------------

    def get_inventories(self, uuid: str) -> tuple[int, dict]:
        """(provider generation, {resource class: inventory})."""
        response = self.request('GET', '/resource_providers/%s/inventories'
                                % _quote(uuid))
        body = response.json()
        return body['resource_provider_generation'], body['inventories']

    def set_inventories(self, uuid: str, generation: int,
                        inventories: dict) -> int:
        """Replace all inventories; the new provider generation.

        Raises :class:`GenerationConflict` if ``generation`` is stale and
        :class:`InventoryInUse` if allocations use removed inventory.
        """
        response = self.request(
            'PUT', '/resource_providers/%s/inventories' % _quote(uuid),
            json={'resource_provider_generation': generation,
                  'inventories': inventories})
        return response.json()['resource_provider_generation']

    def reshape_inventories(self, providers: dict[str, tuple[int, dict]]
                            ) -> None:
        """Replace the inventories of several providers in one request.

        ``providers`` maps a provider uuid to ``(generation, inventories)``
        as :meth:`set_inventories` takes them. Sends ``POST /reshaper``
        (microversion 1.30) without allocations: every provider's
        inventories are replaced, all of them or none. Placement returns
        no generations: each provider's generation afterwards is unknown
        (re-read it with :meth:`get_provider`).

        Raises :class:`Forbidden` when Placement's policy
        (``placement:reshaper:reshape``, the ``service`` role by default)
        denies it, :class:`MicroversionUnsupported` when Placement is older
        than 1.30, :class:`GenerationConflict` when a generation is stale,
        :class:`InventoryInUse` when allocations use removed inventory and
        :class:`PlacementError` (400) e.g. for a provider that does not
        exist.
        """
        body = {
            'inventories': {
                uuid: {'resource_provider_generation': generation,
                       'inventories': inventories}
                for uuid, (generation, inventories) in providers.items()},
            # Required by the reshaper's schema; listing no consumer leaves
            # every allocation as it is.
            'allocations': {},
        }
        try:
            self.request('POST', '/reshaper', json=body,
                         microversion=RESHAPER_MICROVERSION, not_found=None)
        except PlacementError as e:
            refused = {403: Forbidden, 406: MicroversionUnsupported}.get(
                e.status_code or 0)
            if refused is None or type(e) is not PlacementError:
                raise
            raise refused(str(e), status_code=e.status_code, code=e.code,
                          detail=e.detail, request_id=e.request_id) from None

    def get_traits(self, uuid: str) -> tuple[int, list[str]]:
        """(provider generation, traits)."""
        response = self.request('GET', '/resource_providers/%s/traits'
                                % _quote(uuid))
        body = response.json()
        return body['resource_provider_generation'], body['traits']

    def set_traits(self, uuid: str, generation: int,
                   traits: list[str]) -> int:
        """Replace all traits; the new provider generation.

        The traits must exist (see :meth:`ensure_trait`); raises
        :class:`GenerationConflict` if ``generation`` is stale.
        """
        response = self.request(
            'PUT', '/resource_providers/%s/traits' % _quote(uuid),
            json={'resource_provider_generation': generation,
                  'traits': list(traits)})
        return response.json()['resource_provider_generation']

    # Resource classes and traits -----------------------------------------

    def ensure_resource_class(self, name: str) -> None:
        """Make sure resource class ``name`` exists.

        Standard classes (:mod:`cyborg.domain.resource_names`) always
        exist and cost no request; a custom one (``CUSTOM_*``) is created
        if missing.
        """
        if resource_names.is_standard_resource_class(name):
            return
        # PUT creates it or finds it there (201 or 204): one request either
        # way, no GET first, and no race with another conductor creating it.
        self.request('PUT', '/resource_classes/%s' % _quote(name),
                     not_found=None)

    def ensure_trait(self, name: str) -> None:
        """Make sure trait ``name`` exists.

        Standard traits (:mod:`cyborg.domain.resource_names`) always
        exist and cost no request; a custom one (``CUSTOM_*``) is created
        if missing.
        """
        if resource_names.is_standard_trait(name):
            return
        # Idempotent PUT, as for resource classes.
        self.request('PUT', '/traits/%s' % _quote(name), not_found=None)

    # Service --------------------------------------------------------------

    def check_version(self) -> str:
        """Placement's maximum microversion, e.g. ``'1.39'``.

        Raises :class:`PlacementError` if it is below
        :data:`PLACEMENT_MICROVERSION`.
        """
        # The version document takes no microversion header.
        response = self.request('GET', '/', microversion=None,
                                not_found=None)
        try:
            versions = response.json()['versions']
            max_version = str(max(
                (v['max_version'] for v in versions),
                key=_version_tuple))
        except (ValueError, KeyError, TypeError) as e:
            raise PlacementError('Placement GET / returned no usable '
                                 'version document: %r' % (e,))
        if _version_tuple(max_version) < _version_tuple(
                PLACEMENT_MICROVERSION):
            raise PlacementError(
                'Placement supports microversions up to %s; cyborg needs '
                '%s or later' % (max_version, PLACEMENT_MICROVERSION))
        return max_version


def reserve_all(client: PlacementClient, uuid: str,
                generation: int | None = None) -> None:
    """Reserve all of the inventory of provider ``uuid``: its
    allocations stay valid and no new one fits. With ``generation``,
    only while the provider is still at it (an allocation made since
    moved it): GenerationConflict otherwise, as for a concurrent write.
    """
    current, inventories = client.get_inventories(uuid)
    if generation is not None and current != generation:
        raise GenerationConflict(
            'resource provider %s moved from generation %d to %d'
            % (uuid, generation, current), 409)
    if all(record['reserved'] >= record['total']
           for record in inventories.values()):
        return
    client.set_inventories(uuid, current, {
        resource_class: dict(record, reserved=record['total'])
        for resource_class, record in inventories.items()})


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in str(version).split('.'))


def adapter_from_endpoint(url: str, token: str = 'admin',
                          timeout: float | None = 60.0,
                          roles: Sequence[str] | None = None
                          ) -> ks_adapter.Adapter:
    """A keystoneauth1 Adapter for a Placement at ``url``, no keystone.

    Uses the fixed-token plugin (what ``auth_type = admin_token`` loads):
    every request carries ``X-Auth-Token: <token>`` and goes to ``url``;
    nothing is looked up in a catalog. ``roles``, when given, are sent as
    ``X-Roles`` (which Placement's noauth2 takes as the token's roles).
    """
    url = url.rstrip('/')
    auth = token_endpoint.Token(url, token)
    headers = {'X-Roles': ','.join(roles)} if roles is not None else None
    session = ksa.read_environment_once(ks_session.Session(
        auth=auth, timeout=timeout, additional_headers=headers))
    return ks_adapter.Adapter(session, service_type=SERVICE_TYPE,
                              endpoint_override=url)
