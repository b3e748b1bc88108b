from cyborg.policies import base

PATH = '/v2/device_profiles'

rules = [
    base.rule('cyborg:device_profile:get_all', base.PROJECT_READER_OR_ADMIN,
              'List device profiles.', [('GET', PATH)]),
    base.rule('cyborg:device_profile:get_one', base.PROJECT_READER_OR_ADMIN,
              'Show a device profile.',
              [('GET', PATH + '/{device_profile_name_or_uuid}')]),
    base.rule('cyborg:device_profile:create', base.ADMIN,
              'Create a device profile.', [('POST', PATH)]),
    base.rule('cyborg:device_profile:delete', base.ADMIN,
              'Delete device profiles.',
              [('DELETE', PATH), ('DELETE', PATH + '/{name_or_uuid}')]),
]
