"""Package version, as pbr computes it from git metadata."""

import pbr.version

version_info = pbr.version.VersionInfo('openstack-cyborg')
version_string = version_info.version_string
