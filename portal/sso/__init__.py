"""Single sign-on: OpenID Connect (`oidc.py`) and LDAP (`ldap.py`) sign-ins, whose groups name
the user's teams, roles and platform admin rights (`mapping.py`, applied by `services.py`);
docs/sso.md."""
