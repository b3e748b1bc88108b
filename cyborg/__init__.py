"""Cyborg: accelerator management for OpenStack."""

from oslo_service import backend as _service_backend

# Cyborg runs on native threads. oslo.messaging imports oslo.service, whose
# default backend would otherwise be eventlet; a program that chose a
# backend itself keeps its choice.
_service_backend.register_backend_default_hook(
    lambda: _service_backend.BackendType.THREADING)
