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

"""The conductor's side of an agent's restore at start.

See :mod:`cyborg.domain.restore`. :func:`prepared_handles` tells an
agent what its host's prepared handles are and what to do with each
(for a programmed region, with the image it holds, named by the
conductor's bitstream resolver); :func:`record` writes what the agent
did.
"""

from typing import Any

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.conductor import programming
from cyborg.db import prepared_handles as handles_db
from cyborg.db import programming as programming_db
from cyborg.domain import device_tree
from cyborg.domain import restore

LOG = logging.getLogger(__name__)


def _image(context, handle: handles_db.HostHandle,
           resolver: programming.BitstreamResolver
           ) -> tuple[dict[str, Any] | None, str | None]:
    """The image a programmed region holds, or why it cannot be named."""
    if handle.bitstream_id is None:
        return None, None
    try:
        target = programming_db.target(context,
                                       deployable_id=handle.deployable_id)
        return resolver.image(context, handle.bitstream_id,
                              target).image(), None
    except exception.CyborgException as exc:
        return None, 'bitstream %s: %s' % (handle.bitstream_id, exc)


def prepared_handles(context, host: str,
                     resolver: programming.BitstreamResolver
                     ) -> list[dict[str, Any]]:
    """The prepared handles of ``host`` in wire form
    (:class:`cyborg.domain.restore.PreparedHandle`)."""
    found = []
    for handle in handles_db.host_handles(context, host):
        action = handle.action
        image = image_error = None
        if (action == restore.Action.RESTORE and handle.preparation
                == device_tree.Preparation.PROGRAM.value):
            image, image_error = _image(context, handle, resolver)
        found.append(restore.PreparedHandle(
            uuid=handle.uuid, action=action, driver=handle.driver,
            device_address=handle.device_address,
            attach_type=handle.attach_type,
            attach_info=handle.attach_info,
            preparation=handle.preparation,
            arq_uuid=handle.arq_uuid if action != restore.Action.REMOVE
            else None,
            controlpath=handle.controlpath if image else None,
            image=image,
            function_trait=handle.function_trait if image or image_error
            else None,
            image_error=image_error).to_wire())
    return found


def record(context, host: str, outcome: dict[str, Any]) -> None:
    """Record an agent's restore ``outcome``
    (:class:`cyborg.domain.restore.Outcome` in wire form); Invalid when
    it is malformed."""
    try:
        parsed = restore.Outcome(
            restored=[str(u) for u in outcome.get('restored', [])],
            failed={str(u): str(reason) for u, reason
                    in dict(outcome.get('failed', {})).items()},
            released=[str(u) for u in outcome.get('released', [])])
    except (AttributeError, TypeError, ValueError) as exc:
        raise exception.Invalid(reason='malformed restore outcome: %s'
                                % exc)
    failed = handles_db.record_outcome(context, host, parsed)
    for arq_uuid in failed:
        LOG.warning('ARQ %s on %s is bound to an attach handle its agent '
                    'could not restore after a restart', arq_uuid, host)
    LOG.info('Agent of %s restored %d prepared attach handles after its '
             'start, failed %d, released %d held by no ARQ', host,
             len(parsed.restored), len(parsed.failed), len(parsed.released))
