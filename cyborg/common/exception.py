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

"""Cyborg exceptions.

Every exception a request can end in derives from CyborgException and
carries the HTTP status it maps to, so the API turns it into a response in
one place. The conductor raises the same classes; oslo.messaging re-raises
them on the caller's side because this module is an allowed remote module.
It rebuilds them as ``cls(message, **kwargs)``, so subclasses must not
change the constructor's signature: they only set ``msg_fmt`` and ``code``.
"""


class CyborgException(Exception):
    """Base class. ``msg_fmt`` is formatted with the keyword arguments."""

    msg_fmt = 'An unknown exception occurred.'
    code = 500

    def __init__(self, message: str | None = None, **kwargs):
        self.kwargs = kwargs
        if not message:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError):
                message = self.msg_fmt
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


class Invalid(CyborgException):
    msg_fmt = '%(reason)s'
    code = 400


class InvalidParameterValue(Invalid):
    msg_fmt = '%(err)s'


class InvalidUUID(Invalid):
    msg_fmt = 'Expected a uuid but received %(uuid)s.'


class InvalidJSON(Invalid):
    msg_fmt = 'Request is not in valid JSON format: %(reason)s'


class UnsupportedMediaType(CyborgException):
    msg_fmt = ('Unknown mimetype: %(content_type)s; request bodies must be '
               'application/json')
    code = 415


class LimitExceeded(Invalid):
    msg_fmt = ('%(what)s: %(count)d, more than the %(limit)d allowed '
               '(%(option)s)')


class ProjectLimitExceeded(CyborgException):
    msg_fmt = ('Project %(project)s would hold %(count)d ARQs, more than '
               'the %(limit)d allowed ([api] max_arqs_per_project)')
    code = 403


class QuotaExceeded(CyborgException):
    """A creation that would take a project past a limit; the message
    names each resource with its limit, usage and requested amount."""
    msg_fmt = 'Quota exceeded for project %(project)s: %(details)s'
    code = 403


class QuotaUnavailable(CyborgException):
    msg_fmt = ('The limits could not be read from Keystone (%(reason)s); '
               'nothing was changed, retry later.')
    code = 503


class NotAuthorized(CyborgException):
    msg_fmt = 'Not authorized.'
    code = 403


class PolicyNotAuthorized(NotAuthorized):
    msg_fmt = 'Access was denied to the following resource: %(action)s'


class Forbidden(NotAuthorized):
    msg_fmt = '%(reason)s'


class NotFound(CyborgException):
    msg_fmt = 'Resource could not be found.'
    code = 404


class ResourceNotFound(NotFound):
    msg_fmt = '%(resource)s not found with %(key)s=%(value)s'


class DeviceProfileNotFound(NotFound):
    msg_fmt = 'Device Profile not found with %(key)s=%(value)s'


class TaintRuleNotFound(NotFound):
    msg_fmt = 'Device taint rule %(uuid)s could not be found.'


class NotAcceptable(CyborgException):
    msg_fmt = 'Request not acceptable: %(reason)s'
    code = 406


class MicroversionTooLow(NotAcceptable):
    msg_fmt = ('Request not acceptable. The minimal required API version '
               'should be %(version)s')


class Conflict(CyborgException):
    msg_fmt = 'Conflict: %(reason)s'
    code = 409


class DuplicateDeviceProfileName(Conflict):
    msg_fmt = 'A device_profile with name %(name)s already exists.'


class DuplicateDeviceProfileUUID(Conflict):
    msg_fmt = 'A device_profile with uuid %(uuid)s already exists.'


class TaintKeyLimitReached(Conflict):
    msg_fmt = ('Taint key %(key)s would be one more than the %(limit)d '
               'distinct taint keys [taints] max_keys allows: reuse a key '
               'in use, or delete rules whose keys are no longer needed')


class DeviceProfileInUse(Conflict):
    msg_fmt = ('Device profile %(name)s is used by %(count)d accelerator '
               'request(s) and cannot be deleted.')


class DeviceProfileDisabled(Conflict):
    msg_fmt = ('Device profile %(name)s is disabled: it creates no '
               'accelerator requests until an operator enables it again.')


class DeviceProfileGroupsInUse(Conflict):
    msg_fmt = ('Device profile %(name)s has %(count)d accelerator '
               'request(s) not bound yet, which must keep the groups they '
               'were created from: change its groups once they are bound or '
               'deleted.')


class DeviceNotPartitioned(Conflict):
    msg_fmt = ('Device %(uuid)s is not partitioned: its driver reports no '
               'partitions (a MIG GPU of a host whose [nvidia_gpu] '
               'partition_mode is homogeneous does).')


class DevicePartitionsInUse(Conflict):
    msg_fmt = ('Device %(uuid)s holds partitions: its partition profile '
               'can change once they are released.')


class PartitionsFailed(CyborgException):
    msg_fmt = ('Setting the partition profile of device %(uuid)s failed: '
               '%(reason)s')
    code = 502


class ServiceUnavailable(CyborgException):
    msg_fmt = 'Service is unavailable: %(reason)s'
    code = 503


class ConfigInvalid(CyborgException):
    msg_fmt = 'Invalid configuration: %(reason)s'


class ARQNotFound(NotFound):
    msg_fmt = 'ExtArq not found with uuid=%(uuid)s'


class DeployableNotFound(NotFound):
    msg_fmt = 'Deployable not found with resource provider uuid=%(rp_uuid)s'


class DeployableNotOnHost(Invalid):
    msg_fmt = ('Resource provider %(rp_uuid)s is a deployable of host '
               '%(host)s, not of %(hostname)s')


class DeployableMismatch(Invalid):
    msg_fmt = ('Resource provider %(rp_uuid)s does not satisfy group '
               '%(group)d of the device profile of ARQ %(uuid)s: '
               '%(reasons)s')


class NoFreeAttachHandles(Conflict):
    msg_fmt = ('Resource provider %(rp_uuid)s has %(free)d free attach '
               'handle(s); %(wanted)d ARQ(s) asked for one')


class ARQBadState(Conflict):
    msg_fmt = ('Bad state: %(state)s for ARQ: %(uuid)s. Expected state(s): '
               '%(expected)s')


class NoBitstreamSource(CyborgException):
    msg_fmt = ('no bitstream source configured: the conductor needs '
               '[glance] options to find FPGA bitstreams')
    # Nothing can be programmed until an operator configures [glance]:
    # not a condition a client should retry on.
    code = 409


class DeployableInUse(Conflict):
    msg_fmt = ('Deployable %(uuid)s is in use (%(reason)s); it is not '
               'reprogrammed under its accelerator requests')


class DeployableNotProgrammable(Invalid):
    msg_fmt = 'Deployable %(uuid)s cannot be programmed: %(reason)s'


class BitstreamIncompatible(Invalid):
    msg_fmt = ('Bitstream image %(image)s does not fit the region of '
               'deployable %(uuid)s: %(reason)s')


class BitstreamAmbiguous(Conflict):
    msg_fmt = ('%(count)d bitstream images match %(what)s for the region '
               'of deployable %(uuid)s (%(images)s); name one with '
               'accel:bitstream_id')


class ProgramFailed(CyborgException):
    msg_fmt = '%(reason)s'
    # The device (or its agent) failed, not the request.
    code = 502


class ServiceTokenRequired(Forbidden):
    msg_fmt = ('This operation requires a service token. Use the Compute API '
               'to manage instance accelerators.')


class ARQBoundToInstance(Forbidden):
    msg_fmt = ('ARQ %(uuid)s is bound to instance %(instance)s. Use the '
               'Compute API to manage instance accelerators.')


class GlanceNotConfigured(ConfigInvalid):
    msg_fmt = ('Glance is not configured: set [glance] auth_type (and its '
               'options) or endpoint_override')


class GlanceUnavailable(ServiceUnavailable):
    msg_fmt = 'Glance is unavailable: %(reason)s'


class GlanceRequestFailed(CyborgException):
    msg_fmt = 'Glance refused %(what)s: %(reason)s'
    code = 502


class BitstreamNotFound(NotFound):
    msg_fmt = 'Bitstream image %(image)s not found in Glance'


class BitstreamChecksumMismatch(CyborgException):
    msg_fmt = 'Bitstream image %(image)s failed verification: %(reason)s'
    code = 502


class InvalidBitstreamMetadata(Invalid):
    msg_fmt = 'Invalid bitstream metadata %(key)s: %(problem)s'


class BitstreamCacheTooSmall(CyborgException):
    msg_fmt = ('Bitstream image %(image)s (%(size)d bytes) does not fit in '
               'the bitstream cache (%(limit)d bytes, [agent] '
               'bitstream_cache_size_mb)')


class BitstreamCacheFull(CyborgException):
    msg_fmt = ('Bitstream image %(image)s (%(size)d bytes) does not fit in '
               'the bitstream cache now: %(in_use)d of its %(limit)d bytes '
               'hold bitstreams in use')
    code = 503
