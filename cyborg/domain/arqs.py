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

"""What a caller may do with accelerator requests, beside their states
(:mod:`cyborg.domain.arq_states`): whose ARQs it reaches, what a bind
sets, and how to tell from the ARQs that a bind or unbind was done.

The API reads with these rules and the conductor writes with them; each
is written here once.
"""

from collections.abc import Mapping
from typing import Any
from typing import Protocol

from cyborg.domain import arq_states

#: The fields a bind sets, all required (a bind PATCH may add
#: ``project_id`` from microversion 2.1, admins only).
BIND_FIELDS = ('hostname', 'device_rp_uuid', 'instance_uuid')


class Caller(Protocol):
    """What :func:`project_scope` reads of a request context."""

    is_admin: bool
    project_id: str | None


def project_scope(context: Caller) -> str | None:
    """The project whose ARQs the caller sees and changes; None (every
    project) for admins. Another project's ARQ is not found (404)."""
    return None if context.is_admin else context.project_id


def bind_done(arqs: list[Mapping[str, Any]],
              bindings: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether ``arqs`` (as the database has them now) show the bind
    ``bindings`` (``{uuid: {field: value}}`` of :data:`BIND_FIELDS`)
    done: every ARQ out of its unbound states with exactly those
    fields."""
    found = {arq['uuid']: arq for arq in arqs}
    return set(found) == set(bindings) and all(
        found[uuid]['state'] not in arq_states.UNBOUND_STATES and all(
            found[uuid][field] == binding[field] for field in BIND_FIELDS)
        for uuid, binding in bindings.items())


def unbind_done(arqs: list[Mapping[str, Any]], uuids: list[str]) -> bool:
    """Whether ``arqs`` (as the database has them now) show the ARQs
    ``uuids`` unbound."""
    return ({arq['uuid'] for arq in arqs} == set(uuids)
            and all(arq['state'] in arq_states.UNBOUND_STATES
                    for arq in arqs))
