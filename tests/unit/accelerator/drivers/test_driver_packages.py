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

"""A new driver touches only its own package and ``setup.cfg``.

Every driver is found through its entry points (``cyborg.accelerator.driver``
for the driver, ``cyborg.accelerator.driver_opts`` for its options), and
what it needs outside its package is shared code from an allow-list: the
driver interface, the driver errors, the PCI base, tree builders and
option blocks, the host helpers of ``drivers/utils``, the domain rules and
the exceptions. No module outside a driver's package names it, and no
driver reaches ``cyborg.conf``, which imports the drivers' options
modules through their entry points.
"""

import ast
import importlib.metadata
import importlib.util
import os
import subprocess
import sys

import pytest

from cyborg.conf import driver_opts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))
DRIVERS = 'cyborg.accelerator.drivers'
DRIVER_NAMESPACE = 'cyborg.accelerator.driver'

#: What a driver may import outside its own package (modules and
#: everything under them).
SHARED = (
    DRIVERS + '.base',
    DRIVERS + '.errors',
    DRIVERS + '.passthrough',
    DRIVERS + '.pci_base',
    DRIVERS + '.pci_opts',
    DRIVERS + '.utils',
    'cyborg.common.exception',
    'cyborg.domain',
)


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + '.')
               for prefix in prefixes)


def _entry_points(namespace: str) -> list[importlib.metadata.EntryPoint]:
    return sorted(importlib.metadata.entry_points(group=namespace),
                  key=lambda ep: ep.name)


def package_of(module: str) -> str:
    """``cyborg.accelerator.drivers.fpga.intel`` -> ``...drivers.fpga``."""
    return '.'.join(module.split('.')[:4])


def _module_named(name: str) -> str:
    """The module a dotted import names: ``from X import Y`` is module
    ``X.Y`` when Y is a module, else ``X``."""
    try:
        if importlib.util.find_spec(name) is not None:
            return name
    except (ImportError, AttributeError, ValueError):
        pass
    return name.rsplit('.', 1)[0]


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module) of every cyborg module ``source`` (the text of
    ``module``) imports, relative imports resolved."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parent = module.split('.')[:-node.level]
                base = '.'.join(parent + ([base] if base else []))
            names = ['%s.%s' % (base, alias.name) for alias in node.names]
        else:
            continue
        found += [(node.lineno, _module_named(name)) for name in names
                  if _under(name, ('cyborg',))]
    return found


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    with open(spec.origin) as f:
        return f.read()


def central_imports(entry_module: str) -> dict[str, list[str]]:
    """{module outside the entry point's package: ['importer:line']} for
    every module of the package that the entry point reaches."""
    package = package_of(entry_module)
    todo, seen = [package, entry_module], set()
    central: dict[str, list[str]] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for line, name in imported_modules(_source(module), module):
            if _under(name, (package,)):
                todo.append(name)
            else:
                central.setdefault(name, []).append('%s:%d' % (module, line))
    return central


def _parents(module: str) -> list[str]:
    parts = module.split('.')
    return ['.'.join(parts[:i]) for i in range(1, len(parts))]


def reachable(entry_module: str) -> set[str]:
    """Every cyborg module importing ``entry_module`` imports (parent
    packages included)."""
    todo, seen = [entry_module], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += _parents(module)
        todo += [name for _line, name in
                 imported_modules(_source(module), module)]
    return seen


def disallowed(central: dict[str, list[str]]) -> list[str]:
    return sorted('%s (%s)' % (name, ', '.join(where))
                  for name, where in central.items()
                  if not _under(name, SHARED))


ENTRY_POINTS = (_entry_points(DRIVER_NAMESPACE)
                + _entry_points(driver_opts.NAMESPACE))


@pytest.mark.parametrize('entry_point', ENTRY_POINTS,
                         ids=lambda ep: '%s:%s' % (ep.group, ep.name))
def test_a_driver_imports_only_shared_modules_outside_its_package(
        entry_point):
    entry_point.load()  # the entry point resolves
    module = entry_point.value.split(':')[0]
    assert package_of(module).startswith(DRIVERS + '.')
    assert disallowed(central_imports(module)) == []


@pytest.mark.parametrize('entry_point', ENTRY_POINTS,
                         ids=lambda ep: '%s:%s' % (ep.group, ep.name))
def test_a_driver_never_reaches_cyborg_conf(entry_point):
    # cyborg.conf imports the options modules while it is imported: a
    # driver module that imported it would be a cycle.
    module = entry_point.value.split(':')[0]
    assert sorted(name for name in reachable(module)
                  if _under(name, ('cyborg.conf',))) == []


def test_drivers_imported_before_the_configuration_load():
    # What the static check above guards against, once for real: a
    # program that imports the drivers before cyborg.conf.
    script = (
        'import importlib, importlib.metadata\n'
        'for group in %r:\n'
        '    for ep in importlib.metadata.entry_points(group=group):\n'
        '        importlib.import_module(ep.value.split(":")[0])\n'
        'from cyborg.conf import CONF\n'
        'print(CONF.intel_qat_driver.resource_class)\n'
        % ((DRIVER_NAMESPACE, driver_opts.NAMESPACE),))
    result = subprocess.run([sys.executable, '-c', script], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['CUSTOM_QAT']


def test_the_drivers_are_found():
    names = {ep.name for ep in _entry_points(DRIVER_NAMESPACE)}
    assert {'fake_driver', 'pci_driver', 'nvidia_gpu_driver',
            'intel_fpga_driver'} <= names


def test_options_come_from_the_package_of_their_driver():
    drivers = {ep.name: ep.value for ep in _entry_points(DRIVER_NAMESPACE)}
    for ep in _entry_points(driver_opts.NAMESPACE):
        assert ep.name in drivers, ep.name
        assert package_of(ep.value) == package_of(drivers[ep.name]), ep.name


def test_an_import_outside_the_shared_modules_is_reported():
    source = ('from cyborg.accelerator.drivers import base\n'
              'from cyborg.conductor import manager\n'
              'from cyborg.conf import CONF\n'
              'from cyborg.domain.device_tree import Device\n'
              'from . import common\n')
    module = DRIVERS + '.fpga.intel'
    found = {name: line for line, name in
             imported_modules(source, module)}
    assert found == {DRIVERS + '.base': 1, 'cyborg.conductor.manager': 2,
                     'cyborg.conf': 3, 'cyborg.domain.device_tree': 4,
                     DRIVERS + '.fpga.common': 5}
    central = {name: ['x:%d' % line] for name, line in found.items()
               if not name.startswith(DRIVERS + '.fpga')}
    assert disallowed(central) == ['cyborg.conductor.manager (x:2)',
                                   'cyborg.conf (x:3)']


def _driver_packages() -> set[str]:
    return {package_of(ep.value.split(':')[0]) for ep in ENTRY_POINTS}


def test_no_module_outside_a_driver_package_imports_it():
    packages = tuple(sorted(_driver_packages()))
    found = []
    for directory, _dirs, files in os.walk(os.path.join(ROOT, 'cyborg')):
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, ROOT)
            module = relative[:-3].replace(os.sep, '.')
            module = module.removesuffix('.__init__')
            with open(path) as f:
                source = f.read()
            for line, imported in imported_modules(source, module):
                owner = package_of(imported)
                if owner in packages and not _under(module, (owner,)):
                    found.append('%s:%d imports %s' % (relative, line,
                                                       imported))
    assert found == []
