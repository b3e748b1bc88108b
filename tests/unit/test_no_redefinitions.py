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

"""No module or class defines a function or class twice.

The later definition silently replaces the earlier one, so the earlier
is dead code that reads as if it ran (a test helper that claims in
Placement, shadowed by one that does not, went unnoticed this way;
ruff's F811 misses a shadowed name that is used before the second
definition). A property's setter and ``typing.overload`` variants are
the deliberate exceptions.
"""

import ast
import collections
import os

import pytest

from tests.unit import test_license

DefNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _deliberate(node: DefNode) -> bool:
    """A property accessor (``@name.setter``...) or an overload."""
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Attribute) and decorator.attr in (
                'setter', 'getter', 'deleter'):
            return True
        if (isinstance(decorator, ast.Name) and decorator.id == 'overload'
                or isinstance(decorator, ast.Attribute)
                and decorator.attr == 'overload'):
            return True
    return False


def redefined(tree: ast.Module) -> list[str]:
    """``scope.name`` of each name defined twice in one body."""
    found = []

    def scan(body: list[ast.stmt], scope: str) -> None:
        counts = collections.Counter(
            node.name for node in body
            if isinstance(node, DefNode) and not _deliberate(node))
        found.extend('%s.%s' % (scope, name)
                     for name, count in sorted(counts.items()) if count > 1)
        for node in body:
            if isinstance(node, ast.ClassDef):
                scan(node.body, '%s.%s' % (scope, node.name))

    scan(tree.body, '<module>')
    return found


def test_a_redefinition_is_found():
    tree = ast.parse('def a():\n    pass\n\n\ndef b():\n    a()\n\n\n'
                     'def a():\n    pass\n\n\nclass C:\n'
                     '    @property\n    def x(self):\n        return 1\n\n'
                     '    @x.setter\n    def x(self, value):\n        pass\n\n'
                     '    def y(self):\n        pass\n\n'
                     '    def y(self):\n        pass\n')
    assert redefined(tree) == ['<module>.a', '<module>.C.y']


@pytest.mark.parametrize('path', [
    p for p in test_license.source_files() if p.endswith('.py')])
def test_no_name_is_defined_twice(path):
    with open(os.path.join(test_license.ROOT, path)) as f:
        tree = ast.parse(f.read(), path)
    assert redefined(tree) == []
