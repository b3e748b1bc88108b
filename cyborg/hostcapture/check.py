# Copyright 2026 The Cyborg Authors.
#
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

"""``cyborg-manage host check``: what each enabled driver would report
on this host, and what it leaves out and why.

Each driver runs one discovery exactly as the agent runs it (discovery,
health, utilization). What it logs meanwhile (a GPU bound to the host's
driver, the boot disk in use, a VF on a driver instances cannot use, a
configured device that is gone...) is what it leaves out and why. The
check fails when the drivers cannot be loaded (a configuration that
cannot work on this host), when a driver fails, when a driver matches
nothing here, or when its ``addresses`` name a device this host does
not have.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from oslo_config import cfg

from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.agent import discovery
from cyborg.common import exception
from cyborg.domain import device_tree

# The logger every cyborg module logs under.
LOGGER = 'cyborg'


@dataclasses.dataclass
class DriverCheck:
    """What one driver reports here (devices in wire form)."""

    name: str
    devices: list[dict]
    utilization: dict[str, dict]
    notes: list[str]
    error: str | None = None
    # Configured addresses with no PCI function on this host.
    unmatched: list[str] = dataclasses.field(default_factory=list)

    @property
    def problem(self) -> str | None:
        """Why this driver fails the check, None when it does not."""
        if self.error is not None:
            return '%s failed: %s' % (self.name, self.error)
        if not self.devices:
            return '%s matches nothing on this host' % self.name
        if self.unmatched:
            return '%s: %s' % (self.name, '; '.join(self.unmatched))
        return None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class CheckResult:
    drivers: list[DriverCheck]
    config_error: str | None = None

    @property
    def problems(self) -> list[str]:
        found = [] if self.config_error is None else [
            'the configuration cannot work on this host: %s'
            % self.config_error]
        return found + [d.problem for d in self.drivers if d.problem]

    def to_json(self) -> dict:
        return {'drivers': [d.to_json() for d in self.drivers],
                'config_error': self.config_error,
                'problems': self.problems}


class _Collector(logging.Handler):
    """Keeps the records logged while a driver runs."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _collecting():
    """Collect what cyborg logs at INFO and above, instead of printing
    it: the check shows it in its place."""
    logger = logging.getLogger(LOGGER)
    collector = _Collector()
    saved = logger.level, logger.propagate
    logger.addHandler(collector)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield collector
    finally:
        logger.removeHandler(collector)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def check(conf: cfg.ConfigOpts, runner: runner_mod.Runner | None = None,
          host: sysfs.HostRoot | None = None) -> CheckResult:
    """Run every enabled driver of ``conf`` once on ``host``."""
    try:
        with _collecting():
            drivers = discovery.load_drivers(conf, runner=runner, host=host)
    except exception.ConfigInvalid as e:
        # Also a driver that fails while it is built (load_drivers says
        # which and why).
        return CheckResult([], str(e))
    host = host if host is not None else sysfs.HostRoot.from_conf(conf)
    checks = []
    for driver in drivers:
        found = _check_driver(conf, driver)
        found.unmatched = unmatched_addresses(conf, driver, host)
        checks.append(found)
    return CheckResult(checks)


def unmatched_addresses(conf: cfg.ConfigOpts, driver,
                        host: sysfs.HostRoot) -> list[str]:
    """The addresses of the driver's ``addresses`` option (see
    :mod:`cyborg.accelerator.drivers.pci_opts`) with no PCI function on
    this host: configuration that cannot match it. The driver accepts
    them (the device may be plugged in later); the check says so."""
    module = getattr(driver, 'options_module', None)
    if module is None:
        return []
    group = module.group.name
    options = conf[group]
    if 'addresses' not in options:
        return []
    unmatched = []
    for text in options.addresses:
        try:
            address = pci.parse_address(text)
        except host_errors.InvalidPCIAddress:
            continue  # the driver refused it already
        if not sysfs.exists(host, pci.device_path(address)):
            unmatched.append('[%s] addresses names %s, which is no PCI '
                             'device of this host' % (group, text))
    return unmatched


def _check_driver(conf: cfg.ConfigOpts, driver) -> DriverCheck:
    finder = discovery.Discovery(conf.host, conf.host, [driver], None)
    with _collecting() as collector:
        wire, failed, utilization = finder.collect_all()
    notes, error = [], None
    for record in collector.records:
        text = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            why = '%s: %s' % (type(exc).__name__, exc)
            if failed:
                # The discovery's failure: the driver reports nothing.
                error = why
                continue
            # E.g. its utilization could not be read: reported without.
            text = '%s (%s)' % (text, why)
        notes.append(text)
    if failed and error is None:
        error = 'see the agent log'
    return DriverCheck(driver.name, wire, utilization, notes, error)


def _handles(deployable: dict) -> str:
    """``; 4 attach handle(s) PCI (first: bus=3b ...)``, or nothing."""
    handles = deployable['attach_handles']
    if not handles:
        return ''
    first = ' '.join('%s=%s' % item for item in sorted(
        handles[0]['attach_info'].items()))
    return '; %d attach handle(s) %s (first: %s)' % (
        len(handles), '/'.join(sorted({h['attach_type'] for h in handles})),
        first)


def _deployable_line(deployable: dict, depth: int) -> str:
    return '%sdeployable %s: %d x %s; traits %s; preparation %s%s' % (
        '  ' * (depth + 2), deployable['name'],
        deployable['num_accelerators'], deployable['resource_class'],
        ', '.join(deployable['traits']) or 'none',
        device_tree.reported_preparation(deployable), _handles(deployable))


def render(result: CheckResult) -> list[str]:
    """The check as lines of text for an operator."""
    lines = []
    if result.config_error is not None:
        lines.append('configuration: %s' % result.config_error)
    for driver in result.drivers:
        lines.append('%s: %d device(s)%s' % (
            driver.name, len(driver.devices),
            '; FAILED: %s' % driver.error if driver.error else ''))
        for device in driver.devices:
            lines.append('  %s %s %s %s: %s' % (
                device['address'], device['type'], device['vendor'],
                device['model'], device['health']))
            for taint in device.get('taints', []):
                lines.append('    taint %s=%s:%s %s' % (
                    taint['key'], taint['value'], taint['effect'],
                    taint.get('reason', '')))
            for deployable, _parent, depth in device_tree.walk_wire(
                    device['deployables']):
                lines.append(_deployable_line(deployable, depth))
            metrics = driver.utilization.get(device['address'])
            if metrics:
                lines.append('    utilization %s' % ', '.join(
                    '%s=%s' % item for item in sorted(metrics.items())))
        for note in driver.notes:
            lines.append('  left out or noted: %s' % note)
        for unmatched in driver.unmatched:
            lines.append('  configuration: %s' % unmatched)
    problems = result.problems
    lines += ['PROBLEM: %s' % p for p in problems] or [
        'OK: %d driver(s), %d device(s)' % (
            len(result.drivers),
            sum(len(d.devices) for d in result.drivers))]
    return lines
