"""Clients of the other OpenStack services cyborg talks to."""
