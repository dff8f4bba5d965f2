"""`allot login` and `allot logout`: an API token from a username and password, kept in the
configuration file (mode 0600), and revoked again."""

from __future__ import annotations

import getpass
import sys
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from allot_cli import config
from allot_cli.client import Api
from allot_cli.context import Context
from allot_cli.errors import CliError, Exit
from allot_cli.output import emit, when

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _ask(prompt: str, *, secret: bool) -> str:
    if not sys.stdin.isatty():
        raise CliError(Exit.USAGE, f"standard input is not a terminal: pass "
                                   f"{'--password-stdin' if secret else '--username'}")
    return getpass.getpass(prompt) if secret else input(prompt)


def run_login(ctx: Context) -> int:
    """POST /api/v1/auth/token with the username and password; save the token for the server
    (replacing, and revoking, the one saved for it before)."""
    args = ctx.args
    server = ctx.target().server
    if args.token_stdin:
        return _login_with_token(ctx, server, sys.stdin.readline().strip())
    username = args.username or _ask("Username: ", secret=False).strip()
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = _ask(f"Password for {username} at {server}: ", secret=True)
    if not username or not password:
        raise CliError(Exit.USAGE, "a username and a password are needed")
    host = urlsplit(server).hostname or ""
    if server.startswith("http://") and host not in LOOPBACK:
        print(f"allot: warning: {server} is plain HTTP: the password and the token cross the "
              "network unencrypted", file=sys.stderr)
    body: dict[str, object] = {"username": username, "password": password, "scope": args.scope}
    if args.expires_in_days is not None:
        body["expires_in_days"] = args.expires_in_days
    api = Api(config.Target(server, None), timeout=args.timeout)
    try:
        issued = api.post("auth/token", body, auth=False)
    except CliError as exc:
        # Wrong credentials are a 400 with only a detail; too many of them a 429.
        if exc.status == 429 or (exc.status == 400 and isinstance(exc.body, dict)
                                 and set(exc.body) == {"detail"}):
            raise CliError(Exit.AUTH, exc.message, status=exc.status) from exc
        raise
    old = ctx.settings
    if old.token and old.token != issued["token"] and old.server \
            and config.normalise_server(old.server) == server:
        _revoke_quietly(server, old.token, args.timeout)
    path = config.save(config.Config(server=server, token=issued["token"],
                                     username=issued["username"], scope=issued["scope"],
                                     expires_at=issued["expires_at"]))
    summary = {"server": server, "username": issued["username"], "scope": issued["scope"],
               "prefix": issued["prefix"], "expires_at": issued["expires_at"],
               "config": str(path)}
    emit(summary, ctx.output, lambda: (
        f"Signed in to {server} as {issued['username']}: token {issued['prefix']}..., scope "
        f"{issued['scope']}, expires {when(issued['expires_at'])}.\nSaved in {path}."))
    return Exit.OK


def _revoke_quietly(server: str, token: str, timeout: float) -> None:
    # The token being replaced: revoked so it does not linger for months; failing is fine
    # (it may have expired or been revoked already).
    try:
        Api(config.Target(server, token), timeout=timeout).delete("auth/token")
    except CliError:
        pass


def _login_with_token(ctx: Context, server: str, token: str) -> int:
    """Save a token made elsewhere (a single sign-on user's, from the portal's token page or
    POST /api/v1/auth/tokens with a browser session) once the server accepts it."""
    if not token:
        raise CliError(Exit.USAGE, "--token-stdin: standard input held no token")
    api = Api(config.Target(server, token), timeout=ctx.args.timeout)
    mine = api.get("auth/tokens", {"page_size": 1000})  # 401 (exit 4) for a bad token
    rows = mine.get("results", mine) if isinstance(mine, dict) else mine
    this: dict[str, Any] = next(
        (r for r in rows if token.startswith(str(r.get("prefix", "")))), {})
    path = config.save(config.Config(server=server, token=token,
                                     username=ctx.args.username or "",
                                     scope=str(this.get("scope", "")),
                                     expires_at=str(this.get("expires_at") or "")))
    summary = {"server": server, "username": ctx.args.username or "",
               "scope": this.get("scope", ""), "prefix": token[:8],
               "expires_at": this.get("expires_at"), "config": str(path)}
    emit(summary, ctx.output, lambda: (
        f"Signed in to {server} with token {token[:8]}..., scope {this.get('scope', '?')}, "
        f"expires {when(this.get('expires_at'))}.\nSaved in {path}."))
    return Exit.OK


def run_logout(ctx: Context) -> int:
    """Revoke the token (DELETE /api/v1/auth/token) and forget it."""
    target = ctx.target()
    if not target.token:
        emit({"server": target.server, "revoked": 0}, ctx.output,
             lambda: f"Not signed in to {target.server}.")
        return Exit.OK
    revoked = 0
    try:
        revoked = int((ctx.api().delete("auth/token") or {}).get("revoked", 0))
    except CliError as exc:
        if exc.code != Exit.AUTH:  # an expired or revoked token is as good as gone
            raise
    saved = ctx.settings
    if saved.token == target.token:
        config.save(replace(saved, token="", scope="", expires_at=""))
    emit({"server": target.server, "revoked": revoked}, ctx.output,
         lambda: f"Signed out of {target.server}" + (": token revoked." if revoked else "."))
    return Exit.OK
