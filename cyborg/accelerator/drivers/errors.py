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

"""The exceptions accelerator drivers raise.

Every driver failure the agent must tell apart is a :class:`DriverError`:
a configuration that cannot work (:class:`DriverConfigError`, raised from
a driver's constructor: the agent refuses to start), a handle that cannot
be prepared (:class:`PrepareFailed`) and an image that cannot be
programmed (:class:`ProgramFailed`).
"""

from cyborg.common import exception


class DriverError(exception.CyborgException):
    """A driver could not do what it was asked."""

    msg_fmt = 'Accelerator driver error: %(reason)s'


class DriverConfigError(DriverError, exception.ConfigInvalid):
    """A driver's options cannot work; the agent refuses to start.

    Also a ``ConfigInvalid``, which the services turn into one line and
    a refusal to start.
    """

    msg_fmt = 'Invalid configuration: %(reason)s'


class PrepareFailed(DriverError):
    """An attach handle could not be prepared (or released)."""

    msg_fmt = 'Preparing the attach handle failed: %(reason)s'


class ProgramFailed(DriverError):
    """A device could not be programmed with an image."""

    msg_fmt = 'Programming %(device)s failed: %(reason)s'
