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

"""Explicit URL dispatch for the v2 resources.

Pecan's RestController re-inspects every controller's signature on each
request; cyborg's resources have a fixed shape, so the root controller
routes through pecan's ``_route`` hook with this table instead:

=======================  ==========================  ==================
path                     method                      handler
=======================  ==========================  ==================
/v2/<collection>         GET, POST, PATCH, DELETE    get_all, post,
                                                     patch, delete
/v2/<collection>/<id>    GET, PATCH, DELETE          get_one(id),
                                                     patch(id),
                                                     delete(id)
/v2/<collection>/<id>/a  the method in ``actions``   actions[a]
/v2/<collection>/<id>/a  the method in ``actions``   actions[a], for the
/<id>                                                actions in
                                                     ``repeated_id_actions``
=======================  ==========================  ==================

A handler a resource does not define answers 405 with an ``Allow`` header,
as does a handler named in the resource's ``member_only`` on the
collection.
"""

from webob import exc as webob_exc

COLLECTION_METHODS = (('GET', 'get_all'), ('POST', 'post'),
                      ('PATCH', 'patch'), ('DELETE', 'delete'))
MEMBER_METHODS = (('GET', 'get_one'), ('PATCH', 'patch'),
                  ('DELETE', 'delete'))


class Resource:
    """Base of a v2 collection controller.

    ``actions`` maps an action name under a member (``/{id}/disable``) to
    ``(HTTP method, handler name)``.
    """

    actions: dict[str, tuple[str, str]] = {}
    #: Actions also routed with the member's id repeated after them
    #: (``/{id}/program/{id}``), the path a client library sends.
    repeated_id_actions: frozenset[str] = frozenset()
    #: Handlers routed for a member only (``PATCH /v2/<collection>/<id>``
    #: without ``PATCH /v2/<collection>``).
    member_only: frozenset[str] = frozenset()


def _handles(resource: Resource, name: str, table) -> bool:
    """Whether ``resource`` routes handler ``name`` in ``table``."""
    if table is COLLECTION_METHODS and name in resource.member_only:
        return False
    return hasattr(resource, name)


def endpoints(collections: dict[str, Resource],
              member: str = '{id}') -> list[tuple[str, str]]:
    """(method, path template) of every route under ``/v2`` of
    ``collections`` (name -> resource), ``member`` standing for a
    member's identifier."""
    found = []
    for name, resource in collections.items():
        base = '/v2/' + name
        for method, handler in COLLECTION_METHODS:
            if _handles(resource, handler, COLLECTION_METHODS):
                found.append((method, base))
        for method, handler in MEMBER_METHODS:
            if hasattr(resource, handler):
                found.append((method, '%s/%s' % (base, member)))
        for action, (method, _handler) in resource.actions.items():
            found.append((method, '%s/%s/%s' % (base, member, action)))
    return found


def template(name: str, resource: Resource, rest: list[str],
             member: str = '{uuid}') -> str | None:
    """The path template of the route ``rest`` (the path below
    ``/v2/<name>``) takes, as :func:`dispatch` routes it, ``member``
    standing for a member's identifier; None where no route matches."""
    if rest and rest[-1] == '':
        rest = rest[:-1]
    base = '/v2/' + name
    if not rest:
        return base
    if len(rest) == 1:
        return '%s/%s' % (base, member)
    if len(rest) == 2 and rest[1] in resource.actions:
        return '%s/%s/%s' % (base, member, rest[1])
    if (len(rest) == 3 and rest[1] in resource.repeated_id_actions
            and rest[2] == rest[0]):
        return '%s/%s/%s/%s' % (base, member, rest[1], member)
    return None


def _allowed(resource: Resource, table) -> list[str]:
    return [method for method, name in table
            if _handles(resource, name, table)]


def _method_not_allowed(allowed: list[str]):
    error = webob_exc.HTTPMethodNotAllowed()
    error.headers['Allow'] = ', '.join(sorted(allowed))
    return error


def dispatch(resource: Resource, method: str, rest: list[str]):
    """The bound handler for ``method`` on ``rest`` and its arguments."""
    if rest and rest[-1] == '':
        rest = rest[:-1]
    if not rest:
        table = COLLECTION_METHODS
    elif len(rest) == 1:
        table = MEMBER_METHODS
    elif len(rest) == 2 and rest[1] in resource.actions or (
            len(rest) == 3 and rest[1] in resource.repeated_id_actions
            and rest[2] == rest[0]):
        action_method, name = resource.actions[rest[1]]
        if method != action_method:
            raise _method_not_allowed([action_method])
        return getattr(resource, name), rest[:1]
    else:
        raise webob_exc.HTTPNotFound()
    for candidate, name in table:
        if candidate == method and _handles(resource, name, table):
            return getattr(resource, name), rest
    raise _method_not_allowed(_allowed(resource, table))
