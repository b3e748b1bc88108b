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

"""Cyborg: accelerator management for OpenStack."""

from oslo_service import backend as _service_backend

# Cyborg runs on native threads. oslo.messaging imports oslo.service, whose
# default backend would otherwise be eventlet; a program that chose a
# backend itself keeps its choice.
_service_backend.register_backend_default_hook(
    lambda: _service_backend.BackendType.THREADING)
