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

"""The import rules of doc/source/contributor/architecture.rst.

* The database layer holds every SQL statement: no module of cyborg/
  outside cyborg/db/ imports SQLAlchemy or oslo.db's database code
  (``oslo_db.sqlalchemy``, ``oslo_db.exception``, ``oslo_db.api``).
  Allowed: the option registration (``oslo_db.options``, in
  cyborg/conf/), enginefacade's transaction-context decorator on the
  request context (``cyborg/context.py``), as placement's context has,
  and the engine, event and pool modules and oslo.db's transaction
  factory the library patches of ``cyborg/common/patches.py`` change
  (no SQL).
* The domain rules (cyborg/domain/) import nothing of the service but
  the exceptions.
* Each layer imports only the layers below it (:data:`FORBIDDEN_LAYERS`):
  the database layer and the conductor never import the drivers, the
  agent never touches the database, the drivers know nothing of the
  services; the plumbing (cyborg/common/, cyborg/conf/) and the policies
  import no service, and no layer imports the entry points (cyborg/cmd/,
  cyborg/wsgi/) or the all-in-one (cyborg/allinone/), which may import
  any layer. :data:`ALLOWED_ACROSS_LAYERS` lists the crossings allowed,
  each with its reason."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, 'cyborg')
DB_PACKAGE = os.path.join(PACKAGE, 'db')

#: Forbidden outside cyborg/db/: these modules and everything under them.
FORBIDDEN = ('sqlalchemy', 'oslo_db')
#: Allowed everywhere: oslo.db's option registration is configuration.
ALLOWED = ('oslo_db.options',)
#: (module path relative to the repository, imported name) allowed there.
ALLOWED_IN = {
    ('cyborg/context.py', 'oslo_db.sqlalchemy.enginefacade'),
    ('cyborg/common/patches.py', 'sqlalchemy.engine'),
    ('cyborg/common/patches.py', 'sqlalchemy.event'),
    ('cyborg/common/patches.py', 'sqlalchemy.pool.base'),
    ('cyborg/common/patches.py', 'oslo_db.sqlalchemy.enginefacade'),
}


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + '.')
               for prefix in prefixes)


def imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every absolute import in ``tree``; a
    ``from X import Y`` gives ``X.Y``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and (
                not node.level):
            names += [(node.lineno, '%s.%s' % (node.module, alias.name))
                      for alias in node.names]
    return sorted(names)


def violations(path: str, source: str) -> list[str]:
    """'path:line imports name' for each forbidden import of a module
    outside cyborg/db/ (``path`` relative to the repository)."""
    found = []
    for line, name in imported_names(ast.parse(source, path)):
        if not _under(name, FORBIDDEN) or _under(name, ALLOWED):
            continue
        if (path, name) in ALLOWED_IN:
            continue
        found.append('%s:%d imports %s' % (path, line, name))
    return found


def _modules():
    for directory, subdirectories, files in os.walk(PACKAGE):
        subdirectories.sort()
        if directory == DB_PACKAGE or directory.startswith(
                DB_PACKAGE + os.sep):
            continue
        for name in sorted(files):
            if name.endswith('.py'):
                path = os.path.join(directory, name)
                yield os.path.relpath(path, ROOT).replace(os.sep, '/'), path


def test_no_sql_outside_the_database_layer():
    found = []
    checked = 0
    for relative, path in _modules():
        with open(path, encoding='utf-8') as source:
            found += violations(relative, source.read())
        checked += 1
    assert checked > 50  # the walk found the package
    assert not found, ('SQLAlchemy and oslo.db belong in cyborg/db/ '
                       '(add a function there):\n' + '\n'.join(found))


def test_the_check_sees_every_form_of_import():
    source = '\n'.join([
        'import sqlalchemy as sa',
        'import sqlalchemy.exc',
        'from sqlalchemy import exc',
        'from sqlalchemy.orm import Session',
        'from oslo_db import exception as db_exc',
        'from oslo_db.sqlalchemy import enginefacade',
        'import oslo_db.api',
        'from oslo_db import options',
        'import sqlalchemyish',
        'from . import sqlalchemy',
    ])
    assert violations('cyborg/conductor/x.py', source) == [
        'cyborg/conductor/x.py:1 imports sqlalchemy',
        'cyborg/conductor/x.py:2 imports sqlalchemy.exc',
        'cyborg/conductor/x.py:3 imports sqlalchemy.exc',
        'cyborg/conductor/x.py:4 imports sqlalchemy.orm.Session',
        'cyborg/conductor/x.py:5 imports oslo_db.exception',
        'cyborg/conductor/x.py:6 imports oslo_db.sqlalchemy.enginefacade',
        'cyborg/conductor/x.py:7 imports oslo_db.api',
    ]


def test_the_request_context_may_keep_the_transaction_decorator():
    source = ('from oslo_db.sqlalchemy import enginefacade\n'
              'from oslo_db.sqlalchemy import session\n')
    assert violations('cyborg/context.py', source) == [
        'cyborg/context.py:2 imports oslo_db.sqlalchemy.session']


#: What assembles the layers: the console scripts, the WSGI entry point
#: and the all-in-one with its host simulator. No layer imports them.
ENTRY_POINTS = ('cyborg.allinone', 'cyborg.cmd', 'cyborg.wsgi')
#: The service layers, from the top down to the plumbing.
SERVICES = ('cyborg.accelerator', 'cyborg.agent', 'cyborg.api',
            'cyborg.clients', 'cyborg.conductor', 'cyborg.db')

#: Package -> the cyborg packages its modules may not import.
FORBIDDEN_LAYERS = {
    'cyborg.db': ('cyborg.accelerator', 'cyborg.agent', 'cyborg.api',
                  'cyborg.clients', 'cyborg.conductor') + ENTRY_POINTS,
    'cyborg.conductor': ('cyborg.accelerator', 'cyborg.api') + ENTRY_POINTS,
    'cyborg.agent': ('cyborg.api', 'cyborg.clients', 'cyborg.db')
    + ENTRY_POINTS,
    'cyborg.accelerator': ('cyborg.agent', 'cyborg.api', 'cyborg.clients',
                           'cyborg.conductor', 'cyborg.db') + ENTRY_POINTS,
    'cyborg.api': ('cyborg.accelerator', 'cyborg.agent', 'cyborg.clients')
    + ENTRY_POINTS,
    'cyborg.clients': ('cyborg.accelerator', 'cyborg.agent', 'cyborg.api',
                       'cyborg.conductor', 'cyborg.db') + ENTRY_POINTS,
    'cyborg.policies': SERVICES + ENTRY_POINTS,
    'cyborg.common': SERVICES + ('cyborg.domain', 'cyborg.policies')
    + ENTRY_POINTS,
    'cyborg.conf': SERVICES + ('cyborg.common', 'cyborg.domain',
                               'cyborg.policies') + ENTRY_POINTS,
    'cyborg.allinone': ('cyborg.cmd', 'cyborg.wsgi'),
}
#: (module path relative to the repository, imported name) allowed
#: across the layers. The commands' start checks name what a database
#: URL points at, which only the database layer may parse (SQLAlchemy).
ALLOWED_ACROSS_LAYERS = {
    ('cyborg/common/config_checks.py', 'cyborg.db.urls'),
}
#: What the domain rules may import of the service.
DOMAIN_MAY_IMPORT = ('cyborg.domain', 'cyborg.common.exception')


def _package_of(relative: str) -> str:
    """``cyborg/db/arqs.py`` -> ``cyborg.db``."""
    return '.'.join(relative[:-3].split('/')[:2])


def layer_violations(relative: str, source: str) -> list[str]:
    """'path:line imports name' for each import that crosses a layer
    rule (``relative`` is the module's path in the repository)."""
    package = _package_of(relative)
    found = []
    for line, name in imported_names(ast.parse(source, relative)):
        if not _under(name, ('cyborg',)):
            continue
        if package == 'cyborg.domain':
            # "from cyborg.common import exception" names the module.
            bad = not _under(name, DOMAIN_MAY_IMPORT)
        else:
            bad = (_under(name, FORBIDDEN_LAYERS.get(package, ()))
                   and (relative, name) not in ALLOWED_ACROSS_LAYERS)
        if bad:
            found.append('%s:%d imports %s' % (relative, line, name))
    return found


def _all_modules():
    for directory, subdirectories, files in os.walk(PACKAGE):
        subdirectories.sort()
        for name in sorted(files):
            if name.endswith('.py'):
                path = os.path.join(directory, name)
                yield os.path.relpath(path, ROOT).replace(os.sep, '/'), path


def test_each_layer_imports_only_the_layers_below_it():
    found = []
    for relative, path in _all_modules():
        with open(path, encoding='utf-8') as source:
            found += layer_violations(relative, source.read())
    assert not found, ('imports across the layers of '
                       'doc/source/contributor/architecture.rst:\n'
                       + '\n'.join(found))


def test_the_layer_check_sees_each_rule():
    source = '\n'.join([
        'from cyborg.accelerator.drivers import base',
        'from cyborg.domain import device_tree',
        'import cyborg.db.arqs',
        'from cyborg.common import exception',
        'from cyborg.common import rpc',
    ])
    assert layer_violations('cyborg/conductor/x.py', source) == [
        'cyborg/conductor/x.py:1 imports cyborg.accelerator.drivers.base']
    assert layer_violations('cyborg/agent/x.py', source) == [
        'cyborg/agent/x.py:3 imports cyborg.db.arqs']
    assert layer_violations('cyborg/domain/x.py', source) == [
        'cyborg/domain/x.py:1 imports cyborg.accelerator.drivers.base',
        'cyborg/domain/x.py:3 imports cyborg.db.arqs',
        'cyborg/domain/x.py:5 imports cyborg.common.rpc']
    assert layer_violations('cyborg/cmd/x.py', source) == []


def test_the_plumbing_and_the_all_in_one_have_their_rows():
    source = '\n'.join([
        'from cyborg.api import errors',
        'from cyborg.clients import placement',
        'from cyborg.common import rpc',
        'from cyborg.domain import device_tree',
        'from cyborg.allinone import demo_host',
        'from cyborg.conf import CONF',
        'from cyborg.policies import base',
    ])

    def lines(relative):
        return [int(found.split(' ')[0].split(':')[1])
                for found in layer_violations(relative, source)]

    assert lines('cyborg/common/x.py') == [1, 2, 4, 5, 7]
    assert lines('cyborg/conf/x.py') == [1, 2, 3, 4, 5, 7]
    assert lines('cyborg/policies/x.py') == [1, 2, 5]
    assert lines('cyborg/allinone/x.py') == []
    assert lines('cyborg/accelerator/drivers/x.py') == [1, 2, 5]
    assert layer_violations('cyborg/allinone/x.py',
                            'from cyborg.cmd import api') == [
        'cyborg/allinone/x.py:1 imports cyborg.cmd.api']


def test_each_allowed_crossing_is_made_and_needs_its_allowance():
    for relative, name in sorted(ALLOWED_ACROSS_LAYERS):
        with open(os.path.join(ROOT, relative), encoding='utf-8') as f:
            source = f.read()
        assert name in [n for _, n in imported_names(ast.parse(source))]
        # The same import anywhere else in the package is a violation.
        other = os.path.join(os.path.dirname(relative), 'other.py')
        assert layer_violations(other, 'import %s\n' % name) == [
            '%s:1 imports %s' % (other, name)]


def test_driver_helpers_are_helpers_drivers_use():
    """``accelerator/drivers/utils/`` holds what drivers share: each of
    its modules is imported by a driver (a host simulator belongs to
    ``cyborg/allinone/``)."""
    drivers = os.path.join(PACKAGE, 'accelerator', 'drivers')
    helpers = os.path.join(drivers, 'utils')
    prefix = 'cyborg.accelerator.drivers.utils'
    used = set()
    for relative, path in _all_modules():
        if not relative.startswith('cyborg/accelerator/drivers/') or (
                relative.startswith('cyborg/accelerator/drivers/utils/')):
            continue
        with open(path, encoding='utf-8') as source:
            tree = ast.parse(source.read(), relative)
        used.update(name[len(prefix) + 1:].split('.')[0]
                    for _, name in imported_names(tree)
                    if name.startswith(prefix + '.'))
    modules = {name[:-3] for name in os.listdir(helpers)
               if name.endswith('.py') and name != '__init__.py'}
    assert modules and not modules - used, (
        'helpers no driver imports: %s' % sorted(modules - used))
