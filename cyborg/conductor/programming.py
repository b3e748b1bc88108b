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

"""Programming a deployable at bind (an FPGA bitstream or function).

An ARQ whose device profile group names a bitstream or a function
(``accel:bitstream_id``, ``accel:bitstream_name``, ``accel:function_id``,
``accel:function_name``) is bound by a job: before its handle is
prepared, a :class:`BitstreamResolver` finds the image to program, and
the handle's agent programs it through the device's control path (agent
RPC API 1.1, ``program``). Any failure fails the bind, with the reason in
the ARQ's ``bind_error``.

The conductor is given its resolver explicitly; the default,
:class:`NoBitstreamSource`, refuses every request, so that an ARQ asking
for a bitstream fails clearly instead of binding an unprogrammed device.
"""

import dataclasses
from typing import Protocol

from cyborg.common import exception
from cyborg.db import arqs as arq_db


@dataclasses.dataclass(frozen=True)
class Bitstream:
    """An image to program: its id (a Glance image, for example) and
    where the handle's agent reads it on its host."""
    uuid: str
    image_path: str


class BitstreamResolver(Protocol):
    """Finds the image a claim's request (``claim.program``: by key
    without the ``accel:`` prefix, e.g. ``{'bitstream_id': UUID}``)
    names, and makes it readable by the claim's agent
    (``claim.device_host``)."""

    def resolve(self, context, claim: arq_db.Claim) -> Bitstream:
        """The image; raises (any exception, whose message becomes the
        bind error) when there is none."""
        ...


class NoBitstreamSource:
    """The resolver of a conductor that has no source of bitstreams:
    every request is refused."""

    def resolve(self, context, claim: arq_db.Claim) -> Bitstream:
        raise exception.NoBitstreamSource()


class Programmer(Protocol):
    """Asks a claim's agent to program an image (see
    :class:`cyborg.conductor.binding.HandlePreparer`)."""

    def program(self, context, claim: arq_db.Claim,
                bitstream: Bitstream) -> None: ...


def program(context, claim: arq_db.Claim, resolver: BitstreamResolver,
            agents: Programmer) -> None:
    """Program what ``claim`` asks for, if anything; raises on failure."""
    if not claim.program:
        return
    agents.program(context, claim, resolver.resolve(context, claim))
