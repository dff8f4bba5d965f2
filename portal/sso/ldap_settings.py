"""django-auth-ldap's settings (`AUTH_LDAP_*`) from the `ALLOT_LDAP_*` environment, read by
portal/settings.py only when ALLOT_LDAP_SERVER_URI is set (so python-ldap is imported only
then). A missing or contradictory setting stops the process at start, naming it."""

from __future__ import annotations

from typing import Any

import ldap
from django.core.exceptions import ImproperlyConfigured
from django_auth_ldap.config import (
    GroupOfNamesType,
    GroupOfUniqueNamesType,
    LDAPGroupType,
    LDAPSearch,
    NestedActiveDirectoryGroupType,
    PosixGroupType,
)

# ALLOT_LDAP_GROUP_TYPE -> (the group type, the filter that finds such groups)
GROUP_TYPES: dict[str, tuple[type[LDAPGroupType], str]] = {
    "groupOfNames": (GroupOfNamesType, "(objectClass=groupOfNames)"),
    "groupOfUniqueNames": (GroupOfUniqueNamesType, "(objectClass=groupOfUniqueNames)"),
    "posixGroup": (PosixGroupType, "(objectClass=posixGroup)"),
    "activeDirectory": (NestedActiveDirectoryGroupType, "(objectClass=group)"),
}


def ldap_settings(env: Any) -> dict[str, Any]:
    """The AUTH_LDAP_* settings for the directory at ALLOT_LDAP_SERVER_URI."""
    out: dict[str, Any] = {
        "AUTH_LDAP_SERVER_URI": env.str("ALLOT_LDAP_SERVER_URI"),
        "AUTH_LDAP_BIND_DN": env.str("ALLOT_LDAP_BIND_DN", default=""),
        "AUTH_LDAP_BIND_PASSWORD": env.str("ALLOT_LDAP_BIND_PASSWORD", default=""),
        "AUTH_LDAP_START_TLS": env.bool("ALLOT_LDAP_START_TLS", default=False),
        "AUTH_LDAP_USER_ATTR_MAP": env.dict("ALLOT_LDAP_USER_ATTR_MAP", default={
            "first_name": "givenName", "last_name": "sn", "email": "mail"}),
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
    }
    # Without a service account, the user's own bind reads their entry and groups.
    out["AUTH_LDAP_BIND_AS_AUTHENTICATING_USER"] = not out["AUTH_LDAP_BIND_DN"]
    timeout = env.float("ALLOT_LDAP_TIMEOUT_S", default=5.0)
    out["AUTH_LDAP_CONNECTION_OPTIONS"] = {
        ldap.OPT_NETWORK_TIMEOUT: timeout, ldap.OPT_TIMEOUT: timeout,
        ldap.OPT_REFERRALS: 0}
    template = env.str("ALLOT_LDAP_USER_DN_TEMPLATE", default="")
    base = env.str("ALLOT_LDAP_USER_SEARCH_BASE", default="")
    if bool(template) == bool(base):
        raise ImproperlyConfigured(
            "ALLOT_LDAP_SERVER_URI is set: set one of ALLOT_LDAP_USER_DN_TEMPLATE (e.g. "
            "uid=%(user)s,ou=people,dc=example,dc=org) and ALLOT_LDAP_USER_SEARCH_BASE (with "
            "ALLOT_LDAP_USER_FILTER, default (uid=%(user)s)), not "
            f"{'both' if template else 'neither'}")
    if template:
        if "%(user)s" not in template:
            raise ImproperlyConfigured(
                f"ALLOT_LDAP_USER_DN_TEMPLATE={template!r} has no %(user)s")
        out["AUTH_LDAP_USER_DN_TEMPLATE"] = template
    else:
        user_filter = env.str("ALLOT_LDAP_USER_FILTER", default="(uid=%(user)s)")
        if "%(user)s" not in user_filter:
            raise ImproperlyConfigured(f"ALLOT_LDAP_USER_FILTER={user_filter!r} has no %(user)s")
        out["AUTH_LDAP_USER_SEARCH"] = LDAPSearch(base, ldap.SCOPE_SUBTREE, user_filter)
    group_base = env.str("ALLOT_LDAP_GROUP_SEARCH_BASE", default="")
    kind = env.str("ALLOT_LDAP_GROUP_TYPE", default="groupOfNames")
    if kind not in GROUP_TYPES:
        raise ImproperlyConfigured(
            f"ALLOT_LDAP_GROUP_TYPE={kind!r}: one of {', '.join(GROUP_TYPES)}")
    if group_base:
        group_type, group_filter = GROUP_TYPES[kind]
        out["AUTH_LDAP_GROUP_TYPE"] = group_type(name_attr="cn")
        out["AUTH_LDAP_GROUP_SEARCH"] = LDAPSearch(
            group_base, ldap.SCOPE_SUBTREE,
            env.str("ALLOT_LDAP_GROUP_FILTER", default=group_filter))
    elif env.str("ALLOT_SSO_GROUP_TEAMS", default="") or env.str(
            "ALLOT_SSO_ADMIN_GROUPS", default=""):
        raise ImproperlyConfigured(
            "ALLOT_SSO_GROUP_TEAMS or ALLOT_SSO_ADMIN_GROUPS is set with an LDAP directory but "
            "ALLOT_LDAP_GROUP_SEARCH_BASE is not: the groups could not be found (and every "
            "mapped membership would be taken away)")
    return out
