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

"""The cached controller signatures pecan uses (cyborg.api.argspec)."""

import functools

from pecan import core as pecan_core
from pecan import routing as pecan_routing
from pecan import util as pecan_util

from cyborg.api import argspec


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class Controller:
    def plain(self, uuid, *args, **kwargs):
        pass

    @_decorated
    def wrapped(self, name, flag=False):
        pass


def test_same_answer_as_pecan():
    controller = Controller()
    for method in (controller.plain, Controller.plain, controller.wrapped):
        assert argspec.getargspec(method) == pecan_util.getargspec(method)


def test_inspected_once_per_function(monkeypatch):
    argspec._argspec_of.cache_clear()
    calls = []
    real = pecan_util.getargspec
    monkeypatch.setattr(pecan_util, 'getargspec',
                        lambda f: calls.append(f) or real(f))
    for _ in range(3):
        argspec.getargspec(Controller().plain)
    assert calls == [Controller.plain]
    argspec._argspec_of.cache_clear()


def test_install_replaces_pecans_lookups(monkeypatch):
    monkeypatch.setattr(pecan_core, 'getargspec', pecan_util.getargspec)
    monkeypatch.setattr(pecan_routing, 'getargspec', pecan_util.getargspec)
    argspec.install()
    assert pecan_core.getargspec is argspec.getargspec
    assert pecan_routing.getargspec is argspec.getargspec
