"""allot_cli.completion: the scripts `allot completion bash|zsh` print, run by the real shells
on command lines being typed: they offer the commands, options and choices `allot` has."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from allot_cli.completion import levels
from allot_cli.main import build_parser, main

LINES = [  # (words typed, the last one being completed), what is offered
    (["allot", "cap"], "capacity"),
    (["allot", "capacity", ""], "list request approve deny"),
    (["allot", "-o", "json", "list", "--state", ""],
     "pending reserved running preempting finished cancelled rejected failed"),
    (["allot", "list", "--m"], "--mine"),
    (["allot", "--server", "http://x", "capacity", "deny", "3", "--c"], "--comment"),
    (["allot", "completion", ""], "bash zsh"),
    (["allot", "usage", "--group-by", ""], "team queue flavor"),
    (["allot", "submit", "--queue", ""], ""),  # a value: nothing to offer
]


def script(capsys, shell: str) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def test_levels_follow_the_parser():
    tree = levels(build_parser())
    assert tree["_"].words[:3] == ["login", "logout", "submit"]
    assert tree["_ capacity deny"].options[-1] == "--comment"
    assert tree["_ policies test"].positional_files and tree["_ submit"].positional_files
    assert "--password-stdin" not in tree["_ login"].valued  # a flag takes no value


@pytest.mark.parametrize(("words", "offered"), LINES)
def test_bash(capsys, tmp_path, words, offered):
    path = tmp_path / "allot.bash"
    path.write_text(script(capsys, "bash"))
    line = " ".join(f"'{w}'" for w in words)
    done = subprocess.run(
        ["bash", "--norc", "-c", f"source {path}; COMP_WORDS=({line}); "
         f"COMP_CWORD={len(words) - 1}; _allot; echo \"${{COMPREPLY[*]}}\""],
        capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == offered and not done.stderr


@pytest.mark.parametrize(("words", "offered"), LINES)
def test_zsh(capsys, tmp_path, words, offered):
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed: run scripts/ensure_system_packages.sh")
    path = tmp_path / "_allot"
    path.write_text(script(capsys, "zsh"))
    line = " ".join(f"'{w}'" for w in words)
    # compadd and compdef exist only inside zsh's completion system: stand-ins print what
    # would be offered (the words after `--`), filtered by what is typed, as compadd does.
    stubs = ('compdef() { :; }; compadd() { shift; local w; for w in "$@"; do '
             '[[ $w == ${words[CURRENT]}* ]] && print -rn -- "$w "; done; }; ')
    done = subprocess.run(
        ["zsh", "-f", "-c", f"{stubs} source {path}; words=({line}); "
         f"CURRENT={len(words)}; _allot; print"],
        capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == offered and not done.stderr
