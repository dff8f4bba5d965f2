"""Real single sign-on servers on loopback ports for the tests: an OpenID Connect provider
(oidc-provider-mock, on authlib: it signs ID tokens with its own RSA key and serves it as a
JWKS) and an LDAP directory (Debian's slapd with a throwaway configuration and database,
loaded from an LDIF). Each runs as its own process and is stopped by the test's fixture."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

# Where the Django test client's requests go: the provider's redirect URIs point here.
TESTSERVER = "http://testserver"


def free_port() -> int:
    """A TCP port free on loopback now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(ready, what: str, process: subprocess.Popen, log: Path, limit_s: float = 20) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log.read_text()}")
        if ready():
            return
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{what} did not start within {limit_s} s:\n{log.read_text()}")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Provider:
    """An OpenID Connect provider process: its issuer URL and a client registered with it."""

    def __init__(self, issuer: str):
        self.issuer = issuer
        self.client_id = ""
        self.client_secret = ""

    def register(self, auth_method: str) -> None:
        """Register this site's client (redirect URI /oidc/callback/ on the test server)."""
        response = requests.post(f"{self.issuer}/oauth2/clients", timeout=5, json={
            "redirect_uris": [f"{TESTSERVER}/oidc/callback/"],
            "token_endpoint_auth_method": auth_method})
        response.raise_for_status()
        self.client_id = response.json()["client_id"]
        self.client_secret = response.json()["client_secret"]

    def set_user(self, sub: str, **claims: object) -> None:
        """The claims the provider will vouch for when `sub` signs in."""
        requests.put(f"{self.issuer}/users/{sub}", json=claims, timeout=5).raise_for_status()


@contextmanager
def oidc_provider() -> Iterator[Provider]:
    """oidc-provider-mock on a free loopback port, requiring registered clients and nonces."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="allot-oidc-") as tmp:
        log = Path(tmp) / "provider.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1",
                 "--port", str(port), "--require-registration", "true",
                 "--require-nonce", "true"],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"})
        issuer = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return requests.get(f"{issuer}/.well-known/openid-configuration",
                                    timeout=1).ok
            except requests.RequestException:
                return False

        try:
            _wait(ready, "oidc-provider-mock", process, log)
            yield Provider(issuer)
        finally:
            _stop(process)


SUFFIX = "dc=allot,dc=test"
ROOT_DN, ROOT_PASSWORD = f"cn=admin,{SUFFIX}", "root-secret"
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")


def slapd_binary() -> str | None:
    """Debian's slapd (in /usr/sbin, often not on a user's PATH), or None."""
    return shutil.which("slapd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/local/sbin")


def person(uid: str, given: str, family: str, password: str) -> str:
    """An inetOrgPerson under ou=people, as LDIF."""
    return (f"dn: uid={uid},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
            f"cn: {given} {family}\ngivenName: {given}\nsn: {family}\n"
            f"mail: {uid}@allot.test\nuserPassword: {password}\n")


def group(cn: str, *uids: str) -> str:
    """A groupOfNames under ou=groups with these people as members, as LDIF."""
    members = "".join(f"member: uid={uid},ou=people,{SUFFIX}\n" for uid in uids)
    return f"dn: cn={cn},ou=groups,{SUFFIX}\nobjectClass: groupOfNames\ncn: {cn}\n{members}"


class Directory:
    """A slapd process: its URI and the DN templates of its people and groups."""

    def __init__(self, uri: str):
        self.uri = uri
        self.people = f"ou=people,{SUFFIX}"
        self.groups = f"ou=groups,{SUFFIX}"

    def modify(self, dn: str, changes: list) -> None:
        """Change an entry as the directory's root (python-ldap modlist)."""
        import ldap

        conn = ldap.initialize(self.uri)
        try:
            conn.simple_bind_s(ROOT_DN, ROOT_PASSWORD)
            conn.modify_s(dn, changes)
        finally:
            conn.unbind_s()


@contextmanager
def ldap_directory(entries: list[str]) -> Iterator[Directory]:
    """slapd on a free loopback port with a throwaway configuration and database holding
    `entries` (LDIF) under dc=allot,dc=test with ou=people and ou=groups."""
    binary = slapd_binary()
    assert binary is not None
    slapadd = str(Path(binary).with_name("slapadd"))
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="allot-slapd-") as tmp:
        root = Path(tmp)
        (root / "db").mkdir()
        includes = "".join(f"include /etc/ldap/schema/{s}.schema\n" for s in SCHEMAS)
        (root / "slapd.conf").write_text(
            f"{includes}modulepath /usr/lib/ldap\nmoduleload back_mdb\n"
            f"pidfile {root}/slapd.pid\n"
            f"database mdb\nmaxsize 10485760\nsuffix \"{SUFFIX}\"\n"
            f"rootdn \"{ROOT_DN}\"\nrootpw {ROOT_PASSWORD}\ndirectory {root}/db\n")
        base = (f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\n"
                f"o: Allot tests\ndc: allot\n\n"
                f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n\n"
                f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups\n")
        (root / "data.ldif").write_text("\n".join([base, *entries]))
        subprocess.run([slapadd, "-f", str(root / "slapd.conf"), "-l", str(root / "data.ldif")],
                       check=True, capture_output=True, timeout=30)
        log = root / "slapd.log"
        with log.open("w") as out:
            # -d 0: stay in the foreground (so the test owns the process), logging nothing.
            process = subprocess.Popen(
                [binary, "-f", str(root / "slapd.conf"), "-h", f"ldap://127.0.0.1:{port}/",
                 "-d", "0"], stdout=out, stderr=subprocess.STDOUT)

        def ready() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return True
            except OSError:
                return False

        try:
            _wait(ready, "slapd", process, log)
            yield Directory(f"ldap://127.0.0.1:{port}")
        finally:
            _stop(process)
