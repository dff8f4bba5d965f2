"""Where `allot` keeps its server and token: a TOML file, readable by its owner only.

The file is `$ALLOT_CONFIG` if set, else `$XDG_CONFIG_HOME/allot/config.toml`, else
`~/.config/allot/config.toml`. `allot login` writes it (mode 0600, its folder 0700); every
other command reads it. `--server` and `ALLOT_SERVER` choose another server, `ALLOT_TOKEN`
another token. The saved token is only ever sent to the server it was issued by.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from allot_cli.errors import CliError, Exit

KEYS = ("server", "token", "username", "scope", "expires_at")


@dataclass
class Config:
    """What the file holds (each value may be empty)."""

    server: str = ""
    token: str = ""
    username: str = ""
    scope: str = ""
    expires_at: str = ""


def config_path() -> Path:
    """The configuration file's path (it may not exist yet)."""
    explicit = os.environ.get("ALLOT_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "allot" / "config.toml"


def load(path: Path | None = None) -> Config:
    """The saved configuration (empty when there is no file). A file others may read is still
    used, with a warning on stderr naming the `chmod` that fixes it."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise CliError(Exit.USAGE, f"cannot read the configuration {path}: {exc}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CliError(Exit.USAGE, f"the configuration {path} is not valid TOML: {exc}") from exc
    if os.name == "posix" and path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(f"allot: warning: {path} holds a token and is readable by others; "
              f"run: chmod 600 {path}", file=sys.stderr)
    return Config(**{k: str(data.get(k) or "") for k in KEYS})


def save(config: Config, path: Path | None = None) -> Path:
    """Write `config` to a new file, then move it into place: mode 0600 from its creation
    (the token is never readable by others, not even for a moment)."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lines = ["# allot command line (docs/cli.md), written by `allot login`. It holds an API",
             "# token: keep it private (mode 0600).", ""]
    # A JSON string without ASCII escaping is a valid TOML basic string.
    lines += [f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in asdict(config).items()
              if v]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        os.chmod(tmp, 0o600)  # whatever the umask was
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def normalise_server(url: str) -> str:
    """`url` without a trailing slash; a usage error unless it is an http(s) URL with a host."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(Exit.USAGE, f"server {url!r} is not an http:// or https:// URL "
                                   "(e.g. https://allot.example.org)")
    return url


@dataclass(frozen=True)
class Target:
    """The server a command talks to and the token it sends (None: none)."""

    server: str
    token: str | None


def resolve(server_flag: str | None, config: Config) -> Target:
    """The server from `--server`, else ALLOT_SERVER, else the file; the token from
    ALLOT_TOKEN, else the file's when it was issued by that same server."""
    chosen = server_flag or os.environ.get("ALLOT_SERVER") or config.server
    if not chosen:
        raise CliError(Exit.USAGE, "no server: pass --server URL, set ALLOT_SERVER, or run "
                                   "`allot login --server URL` (`make run` serves "
                                   "http://127.0.0.1:8000)")
    server = normalise_server(chosen)
    token = os.environ.get("ALLOT_TOKEN") or None
    if token is None and config.token and config.server \
            and normalise_server(config.server) == server:
        token = config.token
    return Target(server=server, token=token)
