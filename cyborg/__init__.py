"""Cyborg: accelerator management for OpenStack."""
