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

"""Programming an FPGA region: at bind, and through the program API.

An ARQ whose device profile group names a bitstream or a function
(``accel:bitstream_id``, ``accel:bitstream_name``, ``accel:function_id``,
``accel:function_name``) is bound by a job: before its handle is
prepared, :meth:`RegionProgrammer.program_for_arq`

1. finds the bitstream with the conductor's :class:`BitstreamResolver`:
   the image by id, or the single image whose metadata name the function
   and whose ``region_uuid`` fits the region's interface id (none or
   several: the bind fails); an image with broken metadata, or one built
   for another region type, is never programmed;
2. skips programming when the region already holds that bitstream
   (:func:`cyborg.db.programming.begin_for_arq`, which also refuses to
   reprogram a region another ARQ uses);
3. otherwise has the handle's agent fetch the image from Glance itself
   (by id, verified against the image's hash, through its bitstream
   cache) and program it (agent RPC API 1.2, ``program_image``); the
   agent reports its devices again, so the new function shows;
4. records the region's ``bitstream_id`` and its function trait (only on
   that provider) and has Placement synced.

Any failure raises; the bind job ends the ARQ in the asynchronous
bind-failure path with the reason in ``bind_error``.
:meth:`RegionProgrammer.program_deployable` (conductor RPC
``deployable_program``) runs steps 1, 3 and 4 for one image.

The conductor is given its resolver: :class:`GlanceBitstreams` where
``[glance]`` is configured, else :class:`NoBitstreamSource`, which
refuses every request so that an ARQ asking for a bitstream fails clearly
instead of binding an unprogrammed device.
"""

from collections.abc import Callable
import dataclasses
import threading
from typing import Any
from typing import Protocol

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import notifications
from cyborg.conductor import sync_worker
from cyborg.db import binding as binding_db
from cyborg.db import programming as programming_db
from cyborg.domain import bitstream as bitstream_rules
from cyborg.notifications import notifier as notifier_mod
from cyborg.notifications import payloads

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Bitstream:
    """A Glance image to program and its bitstream metadata."""
    uuid: str
    hash_algo: str
    hash_value: str
    size: int | None
    metadata: bitstream_rules.BitstreamMetadata

    def image(self) -> dict[str, Any]:
        """What the agent is sent (agent RPC API 1.2): never a path."""
        return {'id': self.uuid, 'os_hash_algo': self.hash_algo,
                'os_hash_value': self.hash_value, 'size': self.size}


class BitstreamResolver(Protocol):
    """Finds bitstream images."""

    def resolve(self, context, request: dict[str, str],
                target: programming_db.Target) -> Bitstream:
        """The image a device profile group asks for (``request``: by
        key without the ``accel:`` prefix, e.g. ``{'bitstream_id':
        UUID}``) that fits ``target``'s region; raises (any exception,
        whose message becomes the bind error) when there is none."""
        ...

    def image(self, context, image_uuid: str,
              target: programming_db.Target) -> Bitstream:
        """The image ``image_uuid``, if it fits ``target``'s region."""
        ...


class NoBitstreamSource:
    """The resolver of a conductor that has no source of bitstreams:
    every request is refused."""

    def resolve(self, context, request: dict[str, str],
                target: programming_db.Target) -> Bitstream:
        raise exception.NoBitstreamSource()

    def image(self, context, image_uuid: str,
              target: programming_db.Target) -> Bitstream:
        raise exception.NoBitstreamSource()


# Device profile keys (without ``accel:``) -> Glance property filters.
_SEARCH_KEYS = {'function_id': 'function_uuid',
                'function_name': 'function_name',
                'bitstream_name': 'bs_name'}


class GlanceBitstreams:
    """Bitstreams in Glance (``glance_factory`` builds the client, on
    first use, so that the conductor starts while Glance is away)."""

    def __init__(self, glance_factory: Callable[[], Any]):
        self._factory = glance_factory
        self._client = None
        self._lock = threading.Lock()

    def _glance(self):
        with self._lock:
            if self._client is None:
                self._client = self._factory()
            return self._client

    def resolve(self, context, request: dict[str, str],
                target: programming_db.Target) -> Bitstream:
        if 'bitstream_id' in request:
            return self.image(context, request['bitstream_id'], target)
        [(key, value)] = [(k, v) for k, v in sorted(request.items())
                          if k in _SEARCH_KEYS][:1] or [(None, None)]
        if key is None:
            raise exception.BitstreamNotFound(
                image='for %s' % ', '.join(sorted(request)))
        what = '%s %s' % (key, value)
        fitting = []
        for found in self._glance().find_bitstreams(
                **{_SEARCH_KEYS[key]: value}):
            try:
                candidate = _bitstream(found)
            except exception.InvalidBitstreamMetadata as e:
                LOG.warning('Bitstream image %s matches %s but is not '
                            'considered: %s', found.id, what, e)
                continue
            if bitstream_rules.region_fit_problem(
                    candidate.metadata, target.region_id) is None:
                fitting.append(candidate)
        if not fitting:
            raise exception.BitstreamNotFound(
                image='with %s fitting region type %s of deployable %s'
                % (what, target.region_id or 'unknown', target.uuid))
        if len(fitting) > 1:
            raise exception.BitstreamAmbiguous(
                count=len(fitting), what=what, uuid=target.uuid,
                images=', '.join(sorted(b.uuid for b in fitting)))
        return fitting[0]

    def image(self, context, image_uuid: str,
              target: programming_db.Target) -> Bitstream:
        found = _bitstream(self._glance().get(image_uuid))
        problem = bitstream_rules.region_fit_problem(found.metadata,
                                                     target.region_id)
        if problem is not None:
            raise exception.BitstreamIncompatible(
                image=found.uuid, uuid=target.uuid, reason=problem)
        return found


def _bitstream(image) -> Bitstream:
    """The Bitstream of a Glance image; InvalidBitstreamMetadata (or
    BitstreamChecksumMismatch without a hash) when it cannot be one."""
    metadata = bitstream_rules.parse(image.properties or {})
    algo = getattr(image, 'hash_algo', None)
    value = getattr(image, 'hash_value', None)
    if not (algo and value):
        if not image.checksum:
            raise exception.BitstreamChecksumMismatch(
                image=image.id, reason='Glance has no os_hash_value or '
                'checksum for it, so its data cannot be verified')
        algo, value = 'md5', image.checksum
    return Bitstream(image.id, algo, value, image.size, metadata)


class Programmer(Protocol):
    """Asks an agent to program a Glance image (agent RPC API 1.2)."""

    def program_image(self, context, host: str, driver: str | None,
                      controlpath: dict[str, Any] | None,
                      image: dict[str, Any]) -> str | None: ...


class RegionProgrammer:
    """Programs regions for bind jobs and the program API; see the
    module docstring. ``syncer`` brings Placement in line with a host's
    recorded providers once a region is programmed (None: the host stays
    pending for the periodic sync); ``notifier`` sends
    deployable.program.end or .error once each programming is recorded
    (none by default)."""

    def __init__(self, resolver: BitstreamResolver, agents: Programmer,
                 syncer: sync_worker.SyncWorker | None = None,
                 notifier: notifier_mod.Notifier | None = None):
        self.resolver = resolver
        self._notifier = notifier or notifications.disabled()
        self._agents = agents
        self._syncer = syncer
        # One programming of a region at a time in this conductor (the
        # database refuses what other conductors would do meanwhile).
        self._locks: dict[int, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def _region_lock(self, deployable_id: int) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(deployable_id, threading.Lock())

    def program_for_arq(self, context, claim: binding_db.Claim) -> None:
        """Program what ``claim``'s group asks for, if anything; raises
        on failure."""
        if not claim.program:
            return
        if claim.deployable_id is None:
            raise exception.ProgramFailed(reason='the ARQ holds no '
                                          'deployable')
        target = programming_db.target(context,
                                       deployable_id=claim.deployable_id)
        bitstream = self.resolver.resolve(context, claim.program, target)
        with self._region_lock(target.id):
            decision = programming_db.begin_for_arq(
                context, target.id, claim.arq_uuid, bitstream.uuid)
            if decision == programming_db.SKIP:
                LOG.info('Deployable %s already holds bitstream %s; ARQ %s '
                         'binds without programming', target.uuid,
                         bitstream.uuid, claim.arq_uuid)
                return
            self._program(context, target, bitstream)

    def program_deployable(self, context, deployable_uuid: str,
                           image_uuid: str) -> None:
        """Program the deployable with the Glance image (the program
        API); see :meth:`ConductorManager.deployable_program` for what
        it raises."""
        target = programming_db.target(context, uuid=deployable_uuid)
        if target.controlpath is None or target.driver is None:
            raise exception.DeployableNotProgrammable(
                uuid=deployable_uuid, reason='it has no control path to '
                'program through' if target.driver else 'no driver '
                'reports it')
        bitstream = self.resolver.image(context, image_uuid, target)
        with self._region_lock(target.id):
            programming_db.hold(context, target.id)
            try:
                self._program(context, target, bitstream)
            finally:
                programming_db.unhold(context, target.id)

    def _program(self, context, target: programming_db.Target,
                 bitstream: Bitstream) -> None:
        image = dict(bitstream.image(), deployable=target.uuid)
        LOG.info('Programming deployable %s on %s with bitstream %s',
                 target.uuid, target.host, bitstream.uuid)
        try:
            function = self._agents.program_image(
                context, target.host, target.driver, target.controlpath,
                image)
        except exception.DeployableNotProgrammable:
            raise
        except Exception as e:
            if not isinstance(e, _BEFORE_PROGRAMMING):
                # What the region holds now is unknown: nothing is
                # claimed.
                programming_db.record(context, target.id, None)
            failure = exception.ProgramFailed(
                reason='programming deployable %s with bitstream %s '
                'failed: %s' % (target.uuid, bitstream.uuid, _reason(e)))
            self._notify(context, notifications.PROGRAM_ERROR, target,
                         bitstream.uuid, str(failure))
            raise failure from e
        trait = bitstream_rules.function_trait(
            bitstream_rules.trait_vendor(target.traits,
                                         bitstream.metadata.vendor),
            bitstream_rules.canonical_id(function or '')
            or bitstream.metadata.function_uuid)
        programming_db.record(context, target.id, bitstream.uuid, trait)
        LOG.info('Deployable %s holds bitstream %s now (%s)', target.uuid,
                 bitstream.uuid, trait)
        self._notify(context, notifications.PROGRAM_END, target,
                     bitstream.uuid)
        if self._syncer is not None:
            # Now, not after the answer: the program API returns, and the
            # bind job binds, with the new function in Placement.
            self._syncer.sync_host(context, target.host)


    def _notify(self, context, event_type: str,
                target: programming_db.Target, bitstream_id: str,
                error: str | None = None) -> None:
        if self._notifier.enabled:
            payloads.emit(self._notifier, context, event_type, {
                'uuid': target.uuid, 'name': target.name,
                'device_uuid': target.device_uuid, 'host': target.host,
                'rp_uuid': target.rp_uuid, 'driver': target.driver,
                'bitstream_id': bitstream_id, 'error': error})


class _NoAgents:
    """The agents of :func:`refusing_programmer`, which resolves no
    bitstream and so never asks them."""

    def program_image(self, context, host: str, driver: str | None,
                      controlpath: dict[str, Any] | None,
                      image: dict[str, Any]) -> str | None:
        raise exception.NoBitstreamSource()


def refusing_programmer() -> RegionProgrammer:
    """A programmer without a source of bitstreams: every request to
    program is refused (a bind asking for one fails clearly)."""
    return RegionProgrammer(NoBitstreamSource(), _NoAgents())


# Failures of the agent before its driver touched the device (the image
# could not be fetched or verified, the RPC was not sent): the region
# holds what it held.
_BEFORE_PROGRAMMING = (
    exception.BitstreamChecksumMismatch, exception.BitstreamNotFound,
    exception.GlanceUnavailable, exception.GlanceRequestFailed,
    exception.BitstreamCacheTooSmall, exception.BitstreamCacheFull,
    exception.NoBitstreamSource, exception.ConfigInvalid,
    rpc.RPCVersionCapped)


def _reason(error: Exception) -> str:
    if isinstance(error, messaging.RemoteError):
        return '%s: %s' % (error.exc_type, error.value)
    if isinstance(error, messaging.MessagingTimeout):
        return 'the agent did not answer in time'
    return str(error) or type(error).__name__
