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

"""The exceptions a driver raises.

Every failure a driver reports is a :class:`DriverError`: the agent
answers an RPC that ends in one as the expected failure of that call (its
message becomes the ARQ's ``bind_error`` or the program API's reason), and
any other exception as an unexpected one (logged with its traceback). The
helpers of :mod:`cyborg.accelerator.drivers.utils` raise their own
:class:`~cyborg.accelerator.drivers.utils.errors.HostError`; a driver
turns those into one of these, with what they mean for the device.

Like every :class:`~cyborg.common.exception.CyborgException`, they keep
the constructor's signature and only set ``msg_fmt`` (see that module).
"""

from cyborg.common import exception


class DriverError(exception.CyborgException):
    """Base class: a driver cannot do what it was asked."""

    msg_fmt = '%(reason)s'
    # The device (or its host) failed, not the request.
    code = 502


class DriverConfigError(exception.ConfigInvalid, DriverError):
    """A driver's options cannot work on this host; the agent refuses to
    start (and a call that reads them fails)."""

    msg_fmt = 'Invalid configuration: %(reason)s'
    code = 500


class PrepareFailed(DriverError):
    """An attach handle cannot be prepared for an instance (at bind), or
    its preparation cannot be undone (at unbind)."""


class ProgramFailed(DriverError):
    """Programming an image failed; the device keeps what it had, or is
    in an unknown state the message describes. Never a success."""

    msg_fmt = 'Programming %(device)s failed: %(reason)s'
    code = 409


class PartitionRefused(DriverError):
    """A device's partition profile cannot be set now (the device holds
    partitions, or is not partitioned by its driver)."""

    code = 409


class PartitionProfileUnknown(DriverError):
    """A device cannot serve the partition profile asked for."""

    code = 400


class ResetFailed(DriverError):
    """A device reset through the vendor tool failed; the agent
    escalates as the remediation catalog says."""

    msg_fmt = 'Resetting %(device)s failed: %(reason)s'


def config_error(group: str, option: str, reason: str) -> DriverConfigError:
    """The error of option ``option`` of ``[group]``, saying why."""
    return DriverConfigError(reason='[%s] %s: %s' % (group, option, reason))
