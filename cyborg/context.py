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

"""Request context carried through the API, RPC and DB layers."""

from typing import Any

from oslo_context import context as oslo_context


class RequestContext(oslo_context.RequestContext):
    """Security context and request information.

    ``is_admin`` is derived from the roles (``admin``); ``service_roles`` are
    the roles of a validated service token, never of the user token.

    The database layer (:mod:`cyborg.db.api`) gives the class oslo.db's
    transaction attributes (``session``, ``connection``...) when it is
    imported, so that a process that never reads the database (the agent)
    does not import SQLAlchemy for its contexts.
    """

    def __init__(self, is_admin: bool | None = None, **kwargs: Any):
        super().__init__(is_admin=bool(is_admin), **kwargs)
        if is_admin is None:
            self.is_admin = 'admin' in (self.roles or [])

    # Fields oslo.context leaves out of to_dict() that must survive RPC.
    _EXTRA_FIELDS = ('is_admin', 'service_roles', 'service_user_id',
                     'service_project_id')

    def to_dict(self) -> dict:
        values = super().to_dict()
        for field in self._EXTRA_FIELDS:
            values[field] = getattr(self, field)
        return values

    @classmethod
    def from_dict(cls, values: dict, **kwargs: Any) -> 'RequestContext':
        for field in cls._EXTRA_FIELDS:
            kwargs.setdefault(field, values.get(field))
        return super().from_dict(values, **kwargs)


def get_admin_context() -> RequestContext:
    """Context for the services' own work (periodic tasks, start-up)."""
    return RequestContext(is_admin=True, roles=['admin'],
                          overwrite=False)
