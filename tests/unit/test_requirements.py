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

"""requirements.txt lists exactly the distributions cyborg/ imports, each
with a floor (tools/check-floors.sh proves the floors); the all-in-one
extra and test-requirements.txt cover what the all-in-one and the tests
import; setup.cfg has no wsgi_scripts (cyborg.wsgi.api:application is the
WSGI entry point)."""

import ast
from collections.abc import Mapping
import configparser
import functools
from importlib import metadata
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
REQUIREMENT = re.compile(
    r'^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?\s*(?P<spec>[^;]*)')

#: Modules the tests name without their distribution being theirs.
TEST_IMPORTS_NOT_DECLARED = {
    # tests/compat/nova_probe.py only looks at it when Nova imported it.
    'eventlet',
}


def canonical(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def read_requirements(path: str) -> dict[str, str]:
    """{canonical name: version specifier} of a requirements file,
    following -r includes."""
    found = {}
    with open(os.path.join(ROOT, path)) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            if line.startswith('-r'):
                include = line[2:].strip()
                found.update(read_requirements(
                    os.path.join(os.path.dirname(path), include)))
                continue
            match = REQUIREMENT.match(line)
            assert match, '%s: %r' % (path, line)
            found[canonical(match['name'])] = match['spec'].strip()
    return found


def setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'setup.cfg'))
    return parser


def all_in_one_extra() -> dict[str, str]:
    found = {}
    for line in setup_cfg()['extras']['all-in-one'].splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            match = REQUIREMENT.match(line)
            found[canonical(match['name'])] = match['spec'].strip()
    return found


def top_level_imports(top: str) -> dict[str, set[str]]:
    """{top-level module: files} of the absolute imports under ``top``
    that are neither the standard library nor the repository's own."""
    found: dict[str, set[str]] = {}
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
        dirnames[:] = [d for d in dirnames if not d.startswith(('.', '_'))]
        for name in filenames:
            if not name.endswith('.py'):
                continue
            path = os.path.join(dirpath, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    module = module.split('.')[0]
                    if (module in sys.stdlib_module_names
                            or module in ('cyborg', 'tests', 'tools')):
                        continue
                    found.setdefault(module, set()).add(
                        os.path.relpath(path, ROOT))
    return found


@functools.cache
def packages_distributions() -> Mapping[str, list[str]]:
    """importlib's map of top-level modules to distributions, built once:
    it reads every installed distribution's file list (about 0.5 s)."""
    return metadata.packages_distributions()


def distributions(module: str) -> set[str]:
    dists = packages_distributions().get(module)
    assert dists, 'no installed distribution provides %r' % module
    return {canonical(d) for d in dists}


def imported_distributions(top: str) -> dict[str, set[str]]:
    """{canonical distribution: files importing it} under ``top``."""
    found: dict[str, set[str]] = {}
    for module, files in top_level_imports(top).items():
        if top == 'tests' and module in TEST_IMPORTS_NOT_DECLARED:
            continue
        for dist in distributions(module):
            found.setdefault(dist, set()).update(files)
    return found


def test_every_requirement_has_a_floor():
    for path in ('requirements.txt', 'test-requirements.txt',
                 'doc/requirements.txt'):
        for name, spec in read_requirements(path).items():
            assert re.search(r'>=\s*[0-9]', spec), '%s: %s' % (path, name)
    for name, spec in all_in_one_extra().items():
        assert re.search(r'>=\s*[0-9]', spec), 'all-in-one: %s' % name


def test_requirements_are_what_the_service_imports():
    requirements = set(read_requirements('requirements.txt'))
    extra = set(all_in_one_extra())
    imported = imported_distributions('cyborg')
    undeclared = {d: sorted(f) for d, f in imported.items()
                  if d not in requirements | extra}
    assert not undeclared, 'imported, not in requirements.txt: %s' % (
        undeclared)
    unused = requirements - set(imported)
    assert not unused, 'in requirements.txt, not imported: %s' % unused


def test_all_in_one_extra():
    extra = all_in_one_extra()
    imported = imported_distributions('cyborg')
    # The embedded Placement; the clients are the CLIs its instructions
    # use (openstack, with the accelerator commands of cyborgclient).
    assert set(extra) == {'openstack-placement', 'python-openstackclient',
                          'python-cyborgclient'}
    assert imported['openstack-placement'] == {
        'cyborg/allinone/embedded_placement.py'}
    assert not set(extra) & set(read_requirements('requirements.txt'))


def test_test_requirements_cover_what_the_tests_import():
    declared = (set(read_requirements('requirements.txt'))
                | set(all_in_one_extra())
                | set(read_requirements('test-requirements.txt')))
    undeclared = {d: sorted(f)[:3]
                  for d, f in imported_distributions('tests').items()
                  if d not in declared}
    assert not undeclared, (
        'imported by the tests, not in test-requirements.txt: %s'
        % undeclared)


def test_no_wsgi_scripts_entry_point():
    entry_points = setup_cfg()['entry_points']
    assert 'wsgi_scripts' not in entry_points
    assert 'cyborg-wsgi-api' not in entry_points.get('console_scripts', '')


def test_wsgi_module_exposes_application():
    path = os.path.join(ROOT, 'cyborg', 'wsgi', 'api.py')
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    assigned = {target.id for node in tree.body
                if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    assert 'application' in assigned
