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

"""Remediation: what a device's health signals do to it, as data.

A driver reports **signals** per device at every discovery (an NVIDIA
Xid ``xid.79``, a rising AER counter ``pcie.aer-fatal``, a PCIe link
below its maximum ``pcie.link-width``, its own binary verdict
``unhealthy``...). The **catalog** maps each signal name (exact, or a
glob pattern such as ``xid.*``) to a :class:`Remedy`: an action and the
effect of the taint it puts on the device:

* ``ignore``: nothing;
* ``degrade``: a taint of effect ``None`` (visible, still schedulable);
* ``taint``: a taint of the entry's effect;
* ``reset_device``: a taint of the entry's effect, and a reset of the
  device through its driver once no accelerator request is bound on it;
  a reset that works clears the taint, one that fails escalates (by
  default to ``reboot_host``);
* ``reboot_host``: the taint, and a host taint (:data:`REBOOT_KEY`) on
  every device of the host.

:class:`Tracker` keeps the agent's state between reports: a taint stays
until its signal has been absent from ``recovery_reports`` reports in a
row (so one noisy report never flaps a device), or, for a sticky entry
(and every ``reset_device`` and ``reboot_host`` entry), until the reset
works, a later signal cancels it (``cancels``), or the agent restarts
(a reboot restarts it).

Dependency-free: the agent and its tests import it; configuration is
parsed here too (:func:`parse_override`) so that a wrong entry is
refused with one clear message.
"""

from __future__ import annotations

from collections.abc import Hashable
from collections.abc import Iterable
import dataclasses
import fnmatch
import re
from typing import Generic
from typing import TypeVar

from cyborg.domain import str_enum
from cyborg.domain import taints as taints_mod

Effect = taints_mod.Effect


class Action(str_enum.StrEnum):
    IGNORE = 'ignore'
    DEGRADE = 'degrade'
    TAINT = 'taint'
    RESET_DEVICE = 'reset_device'
    REBOOT_HOST = 'reboot_host'


ACTIONS = tuple(action.value for action in Action)

#: Signal of a driver's own binary verdict (its ``health()``).
UNHEALTHY = 'unhealthy'
#: Key of the host taint a ``reboot_host`` remedy puts on every device.
REBOOT_KEY = 'cyborg.reboot-required'
#: Clean reports in a row after which a signal's taint goes (default of
#: ``[remediation] recovery_reports``).
DEFAULT_RECOVERY_REPORTS = 3

_SIGNAL = re.compile(r'^[a-z][a-z0-9._*?-]*$')
# Effects from the weakest to the strongest, for merging two taints of
# one key.
_STRENGTH = {Effect.NONE: 0, Effect.NO_SCHEDULE: 1, Effect.NO_EXECUTE: 2}


#: A signal name: lower-case, short enough that ``cyborg.<name>`` is a
#: taint key.
_SIGNAL_NAME = re.compile(r'^[a-z][a-z0-9._-]*$')
SIGNAL_MAX_LENGTH = taints_mod.KEY_MAX_LENGTH - len('cyborg.')


@dataclasses.dataclass(frozen=True)
class Signal:
    """One health signal of one device in one report."""

    #: Lower-case dotted name: ``xid.48``, ``pcie.aer-fatal``...
    name: str
    #: What the driver saw (log text, counter values), for the taint.
    reason: str = ''

    def __post_init__(self) -> None:
        if (not _SIGNAL_NAME.match(self.name)
                or len(self.name) > SIGNAL_MAX_LENGTH):
            raise ValueError('signal name %r must start with a lower-case '
                             'letter, hold only lower-case letters, digits, '
                             '".", "-" and "_", and have at most %d '
                             'characters' % (self.name, SIGNAL_MAX_LENGTH))


@dataclasses.dataclass(frozen=True)
class Remedy:
    """One catalog entry."""

    #: A signal name, or a glob pattern of signal names (``xid.*``).
    pattern: str
    action: Action
    #: The taint's effect (``degrade`` always gives ``None``).
    effect: Effect = Effect.NO_SCHEDULE
    #: The taint key; empty: ``cyborg.<signal name>``.
    key: str = ''
    #: Kept until reset, cancelled or the agent restarts, whatever the
    #: later reports say.
    sticky: bool = False
    #: Clean reports before recovery; 0: ``[remediation]
    #: recovery_reports``.
    recover_after: int = 0
    #: Patterns of the signals of the same device this one clears.
    cancels: tuple[str, ...] = ()
    #: What a failed reset turns into (``reset_device`` only).
    escalate: Action = Action.REBOOT_HOST
    description: str = ''

    def __post_init__(self) -> None:
        object.__setattr__(self, 'action', Action(self.action))
        object.__setattr__(self, 'effect', Effect(self.effect))
        object.__setattr__(self, 'escalate', Action(self.escalate))
        if not _SIGNAL.match(self.pattern):
            raise ValueError('signal pattern %r must be lower-case letters, '
                             'digits, ".", "-", "_" and the globs "*" "?"'
                             % self.pattern)
        if self.key:
            taints_mod.check_key(self.key)
        if self.recover_after < 0:
            raise ValueError('recover_after of %s must be 0 or more'
                             % self.pattern)
        if self.escalate not in (Action.TAINT, Action.REBOOT_HOST):
            raise ValueError('escalate of %s must be taint or reboot_host'
                             % self.pattern)

    @property
    def holds(self) -> bool:
        """Whether its taint waits for a reset, a cancel or a restart
        instead of clean reports."""
        return self.sticky or self.action in (Action.RESET_DEVICE,
                                              Action.REBOOT_HOST)

    def taint_key(self, signal: str) -> str:
        return self.key or signal_key(signal)

    def taint_effect(self) -> Effect:
        return Effect.NONE if self.action == Action.DEGRADE else self.effect


def signal_key(signal: str) -> str:
    """The default taint key of a signal: ``xid.48`` ->
    ``cyborg.xid.48``."""
    return taints_mod.check_key('cyborg.' + signal)


def _xid(number: int, action: Action, why: str, **fields) -> Remedy:
    return Remedy('xid.%d' % number, action, description=why, **fields)


#: The default catalog, after NVIDIA's Xid catalog and the PCIe errors
#: every driver reads from sysfs. ``[remediation] override`` changes or
#: adds entries.
DEFAULT_CATALOG: tuple[Remedy, ...] = (
    Remedy(UNHEALTHY, Action.TAINT, key=taints_mod.UNHEALTHY_KEY,
           # The driver's own verdict is judged afresh at every discovery,
           # as it always was.
           recover_after=1, description='the driver reports it unhealthy'),
    Remedy('pcie.gone', Action.TAINT, key=taints_mod.UNHEALTHY_KEY,
           description='the device is gone from the PCI bus'),
    Remedy('pcie.aer-fatal', Action.TAINT,
           description='fatal PCIe errors (AER) rising'),
    Remedy('pcie.aer-nonfatal', Action.DEGRADE,
           description='non-fatal PCIe errors (AER) rising'),
    Remedy('pcie.link-width', Action.DEGRADE,
           description='PCIe link narrower than its maximum'),
    Remedy('pcie.link-speed', Action.DEGRADE,
           description='PCIe link slower than its maximum'),
    # The agent could not prepare again, after its start, an attach handle
    # a bound request holds: no new work until the agent starts again.
    Remedy('restore.failed', Action.TAINT, sticky=True,
           description='an attach handle of a bound request could not be '
           'restored after the agent started'),
    # Application-level Xids: the application restarts, the GPU is fine.
    *(_xid(number, Action.IGNORE, why) for number, why in (
        (13, 'graphics engine exception'), (31, 'GPU memory page fault'),
        (43, 'GPU stopped processing'), (45, 'preemptive cleanup'),
        (68, 'video decoder exception'), (109, 'context switch timeout'))),
    _xid(94, Action.DEGRADE, 'contained ECC error (the application '
         'restarts)'),
    _xid(92, Action.DEGRADE, 'high single-bit ECC error rate'),
    _xid(48, Action.RESET_DEVICE, 'double-bit ECC error'),
    _xid(95, Action.RESET_DEVICE, 'uncontained ECC error'),
    _xid(119, Action.RESET_DEVICE, 'GSP RPC timeout'),
    _xid(120, Action.RESET_DEVICE, 'GSP error'),
    _xid(79, Action.REBOOT_HOST, 'GPU has fallen off the bus'),
    # Xid 154 states the recovery action the driver wants now; "None"
    # cancels what earlier Xids asked for.
    Remedy('xid.154.none', Action.IGNORE, cancels=('xid.*',),
           description='the GPU driver needs no recovery action any more'),
    Remedy('xid.154.gpu-reset-required', Action.RESET_DEVICE,
           description='the GPU driver asks for a GPU reset'),
    Remedy('xid.154.drain-and-reset', Action.RESET_DEVICE,
           description='the GPU driver asks for a drain and GPU reset'),
    Remedy('xid.154.node-reboot-required', Action.REBOOT_HOST,
           description='the GPU driver asks for a node reboot'),
    # Any other Xid: as before, the GPU takes no new work until the
    # signal is gone for recovery_reports reports.
    Remedy('xid.*', Action.TAINT, description='device-fatal Xid'),
)


class Catalog:
    """Signal patterns to remedies: an exact name first, then the
    longest matching pattern."""

    def __init__(self, remedies: Iterable[Remedy]) -> None:
        self._remedies: dict[str, Remedy] = {}
        for remedy in remedies:
            self._remedies[remedy.pattern] = remedy

    def __iter__(self):
        return iter(self._remedies.values())

    def get(self, pattern: str) -> Remedy | None:
        return self._remedies.get(pattern)

    def lookup(self, signal: str) -> Remedy:
        exact = self._remedies.get(signal)
        if exact is not None:
            return exact
        matches = [pattern for pattern in self._remedies
                   if fnmatch.fnmatchcase(signal, pattern)]
        if not matches:
            # A signal no entry knows: shown, never keeps work off.
            return Remedy(signal, Action.DEGRADE,
                          description='unknown signal')
        return self._remedies[max(matches, key=len)]

    def with_overrides(self, overrides: Iterable[str]) -> Catalog:
        """A catalog with ``[remediation] override`` entries applied."""
        remedies = dict(self._remedies)
        for text in overrides:
            remedy = parse_override(text, remedies)
            remedies[remedy.pattern] = remedy
        return Catalog(remedies.values())


_BOOLS = {'true': True, 'yes': True, '1': True, 'false': False,
          'no': False, '0': False}


def parse_override(text: str, known: dict[str, Remedy]) -> Remedy:
    """One ``[remediation] override`` value:
    ``PATTERN: field=value field=value...`` with fields ``action``,
    ``effect``, ``key``, ``sticky``, ``recover_after``, ``cancels``
    (comma-separated patterns) and ``escalate``. Fields left out keep
    the entry's value (an entry of the default catalog), or the
    defaults of :class:`Remedy` for a new pattern, which must name an
    action. ValueError saying what is wrong."""
    pattern, sep, rest = text.partition(':')
    pattern = pattern.strip()
    if not sep or not pattern:
        raise ValueError('remediation override %r must read "SIGNAL: '
                         'action=ACTION ..."' % text)
    fields: dict[str, object] = {}
    for item in rest.split():
        name, sep, value = item.partition('=')
        if not sep or not value:
            raise ValueError('remediation override %r: %r is not '
                             'field=value' % (text, item))
        if name in ('action', 'effect', 'key', 'escalate'):
            fields[name] = value
        elif name == 'sticky':
            if value.lower() not in _BOOLS:
                raise ValueError('remediation override %r: sticky must be '
                                 'true or false' % text)
            fields[name] = _BOOLS[value.lower()]
        elif name == 'recover_after':
            if not value.isdigit():
                raise ValueError('remediation override %r: recover_after '
                                 'must be a number' % text)
            fields[name] = int(value)
        elif name == 'cancels':
            fields[name] = tuple(v for v in value.split(',') if v)
        else:
            raise ValueError('remediation override %r: unknown field %r '
                             '(action, effect, key, sticky, recover_after, '
                             'cancels, escalate)' % (text, name))
    base = known.get(pattern)
    if base is None and 'action' not in fields:
        raise ValueError('remediation override %r: a new signal pattern '
                         'needs an action (%s)' % (text, ', '.join(ACTIONS)))
    try:
        if base is None:
            return Remedy(pattern=pattern, **fields)  # type: ignore[arg-type]
        return dataclasses.replace(base, **fields)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError('remediation override %r: %s' % (text, exc))


def load_catalog(overrides: Iterable[str]) -> Catalog:
    """The default catalog with ``overrides`` applied."""
    return Catalog(DEFAULT_CATALOG).with_overrides(overrides)


# The agent's state ---------------------------------------------------------

@dataclasses.dataclass
class _Active:
    remedy: Remedy
    reason: str
    #: Reports in a row without the signal.
    clean: int = 0
    #: A reset was asked and failed (escalated) or cannot be done.
    reset_failed: bool = False
    reset_unsupported: bool = False


class ResetOutcome(str_enum.StrEnum):
    DONE = 'done'
    FAILED = 'failed'
    UNSUPPORTED = 'unsupported'


#: What the tracker tells devices apart by (the agent: (driver, address)).
DeviceKey = TypeVar('DeviceKey', bound=Hashable)


class Tracker(Generic[DeviceKey]):
    """The active signals of each device of one host, between reports.

    Devices are keys the caller chooses (the agent uses ``(driver,
    address)``). Call :meth:`observe` once per report with every
    device's signals, then read :meth:`taints`.
    """

    def __init__(self, catalog: Catalog,
                 recovery_reports: int = DEFAULT_RECOVERY_REPORTS) -> None:
        if recovery_reports < 1:
            raise ValueError('recovery_reports must be 1 or more')
        self.catalog = catalog
        self.recovery_reports = recovery_reports
        self._active: dict[DeviceKey, dict[str, _Active]] = {}

    def devices(self) -> list[DeviceKey]:
        """The devices with an active signal."""
        return list(self._active)

    def observe(self, signals: dict[DeviceKey, list[Signal]],
                keep: Iterable[DeviceKey] = ()) -> None:
        """One report: ``signals`` of every device reported (a device
        without signals maps to []). Devices neither there nor in
        ``keep`` (those of a driver that failed this time) are gone and
        forgotten."""
        kept = set(keep)
        for device in list(self._active):
            if device not in signals and device not in kept:
                del self._active[device]
        for device, seen in signals.items():
            self._step(device, seen)

    def _step(self, device: DeviceKey, seen: list[Signal]) -> None:
        active = self._active.setdefault(device, {})
        names = set()
        for signal in seen:
            remedy = self.catalog.lookup(signal.name)
            for pattern in remedy.cancels:
                for name in [n for n in active
                             if fnmatch.fnmatchcase(n, pattern)]:
                    del active[name]
            if remedy.action == Action.IGNORE:
                continue
            names.add(signal.name)
            state = active.get(signal.name)
            if state is None:
                active[signal.name] = _Active(remedy, signal.reason)
            else:
                state.clean = 0
                state.reason = signal.reason or state.reason
        for name, state in list(active.items()):
            if name in names or state.remedy.holds:
                continue
            state.clean += 1
            needed = state.remedy.recover_after or self.recovery_reports
            if state.clean >= needed:
                del active[name]
        if not active:
            del self._active[device]

    def resets_due(self) -> list[DeviceKey]:
        """Devices with a ``reset_device`` signal not reset yet."""
        return [device for device, active in self._active.items()
                if any(self._wants_reset(state)
                       for state in active.values())]

    @staticmethod
    def _wants_reset(state: _Active) -> bool:
        return (state.remedy.action == Action.RESET_DEVICE
                and not state.reset_failed and not state.reset_unsupported)

    def reset_result(self, device: DeviceKey, outcome: ResetOutcome) -> None:
        """What came of resetting ``device``: done clears its
        ``reset_device`` signals; failed escalates them; unsupported
        keeps their taints (no further attempts)."""
        active = self._active.get(device, {})
        for name, state in list(active.items()):
            if not self._wants_reset(state):
                continue
            if outcome == ResetOutcome.DONE:
                del active[name]
            elif outcome == ResetOutcome.FAILED:
                state.reset_failed = True
            else:
                state.reset_unsupported = True
        if device in self._active and not active:
            del self._active[device]

    def reboot_reasons(self) -> list[str]:
        """Why the host needs a reboot (empty: it does not)."""
        return sorted('%s on %s' % (name, device[-1] if isinstance(
            device, tuple) else device)
            for device, active in self._active.items()
            for name, state in active.items() if self._reboots(state))

    @staticmethod
    def _reboots(state: _Active) -> bool:
        return (state.remedy.action == Action.REBOOT_HOST or (
            state.reset_failed
            and state.remedy.escalate == Action.REBOOT_HOST))

    def active(self, device: DeviceKey) -> list[str]:
        """The signal names holding a taint on ``device``."""
        return sorted(self._active.get(device, {}))

    def taints(self, device: DeviceKey) -> list[taints_mod.Taint]:
        """The driver taints of ``device`` now, the host's included,
        one per key (the strongest effect), sorted by key."""
        found: dict[str, taints_mod.Taint] = {}
        for name, state in sorted(self._active.get(device, {}).items()):
            _merge(found, self._taint(name, state))
        reasons = self.reboot_reasons()
        if reasons:
            _merge(found, taints_mod.Taint(
                key=REBOOT_KEY, effect=Effect.NO_SCHEDULE,
                value='host', reason='host reboot required: ' +
                '; '.join(reasons)))
        return [found[key] for key in sorted(found)]

    @staticmethod
    def _taint(name: str, state: _Active) -> taints_mod.Taint:
        remedy = state.remedy
        effect = remedy.taint_effect()
        why = state.reason or remedy.description or name
        if state.reset_failed:
            why = 'reset failed; ' + why
            if remedy.escalate == Action.TAINT:
                effect = Effect.NO_SCHEDULE
        elif state.reset_unsupported:
            why = 'needs a reset its driver cannot do; ' + why
        elif remedy.action == Action.RESET_DEVICE:
            why = 'reset pending; ' + why
        return taints_mod.Taint(key=remedy.taint_key(name), effect=effect,
                                value=name, reason=why)


def _merge(found: dict[str, taints_mod.Taint],
           taint: taints_mod.Taint) -> None:
    current = found.get(taint.key)
    if current is None or _STRENGTH[taint.effect] > _STRENGTH[
            current.effect]:
        found[taint.key] = taint


def unhealthy(taints: Iterable[taints_mod.Taint]) -> bool:
    """The binary health of a device with these taints: unhealthy iff a
    taint keeps new allocations off."""
    return any(taint.keeps_allocations_off() for taint in taints)
