"""`allot completion bash|zsh`: a completion script written from the argument parser itself,
so it offers exactly the commands, options and choices `allot` has (no library needed).

Bash: `source <(allot completion bash)` in ~/.bashrc (or save it in
/etc/bash_completion.d/allot). Zsh: `source <(allot completion zsh)` after `compinit` in
~/.zshrc (or save it as `_allot` in a folder of `$fpath`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

# Attributes set on an argparse action: its value is a file or folder name; the words its
# value may be (when argparse's `choices` cannot say it, as for `--state pending,running`).
FILES = "complete_files"
WORDS = "complete_words"


@dataclass
class Level:
    """What can follow a command path such as `capacity request`."""

    words: list[str] = field(default_factory=list)  # subcommands, or a positional's choices
    options: list[str] = field(default_factory=list)
    valued: list[str] = field(default_factory=list)  # options that take a value
    files: list[str] = field(default_factory=list)  # options whose value is a file name
    choices: dict[str, list[str]] = field(default_factory=dict)  # option -> its choices
    positional_files: bool = False


def levels(parser: argparse.ArgumentParser, path: str = "_") -> dict[str, Level]:
    """Every command path of `parser` (the top is `_`, below it `_ capacity`, ...)."""
    out: dict[str, Level] = {}
    level = out[path] = Level()
    for action in parser._actions:  # argparse has no public walk of its parser tree
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                level.words.append(name)
                out.update(levels(sub, f"{path} {name}"))
        elif action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            level.options += action.option_strings
            if action.nargs != 0:
                level.valued += action.option_strings
                words = action.choices or getattr(action, WORDS, None)
                for opt in action.option_strings:
                    if words:
                        level.choices[opt] = [str(c) for c in words]
                    if getattr(action, FILES, False):
                        level.files.append(opt)
        else:
            if action.choices:
                level.words += [str(c) for c in action.choices]
            if getattr(action, FILES, False):
                level.positional_files = True
    return out


def _assoc(name: str, values: dict[str, str], quote: str) -> str:
    body = " ".join(f"[{quote}{k}{quote}]={quote}{v}{quote}" for k, v in values.items())
    return f"{name}=( {body} )"


def _tables(parser: argparse.ArgumentParser) -> dict[str, dict[str, str]]:
    tree = levels(parser)
    return {
        "words": {k: " ".join(v.words) for k, v in tree.items() if v.words},
        "options": {k: " ".join(v.options) for k, v in tree.items()},
        "valued": {k: " ".join(v.valued) for k, v in tree.items() if v.valued},
        "files": {k: " ".join(v.files) for k, v in tree.items() if v.files},
        "choices": {f"{k} {opt}": " ".join(c) for k, v in tree.items()
                    for opt, c in v.choices.items()},
        "posfiles": {k: "1" for k, v in tree.items() if v.positional_files},
    }


BASH = r"""# bash completion for allot: source <(allot completion bash)
{tables}

_allot() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    local cmd=_ w skip= i
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        if [[ -n $skip ]]; then skip=; continue; fi
        if [[ $w == -* ]]; then
            [[ $w != *=* && " ${{_allot_valued[$cmd]}} " == *" $w "* ]] && skip=1
            continue
        fi
        [[ " ${{_allot_words[$cmd]}} " == *" $w "* && -n ${{_allot_options["$cmd $w"]+x}} ]] \
            && cmd="$cmd $w"
    done
    COMPREPLY=()
    if [[ -n ${{_allot_choices["$cmd $prev"]+x}} ]]; then
        COMPREPLY=($(compgen -W "${{_allot_choices["$cmd $prev"]}}" -- "$cur"))
    elif [[ " ${{_allot_files[$cmd]}} " == *" $prev "* ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    elif [[ " ${{_allot_valued[$cmd]}} " == *" $prev "* ]]; then
        return 0
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "${{_allot_options[$cmd]}}" -- "$cur"))
    elif [[ -n ${{_allot_words[$cmd]}} ]]; then
        COMPREPLY=($(compgen -W "${{_allot_words[$cmd]}}" -- "$cur"))
    elif [[ -n ${{_allot_posfiles[$cmd]}} ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return 0
}}
complete -o bashdefault -o default -F _allot allot
"""

ZSH = r"""#compdef allot
# zsh completion for allot: source <(allot completion zsh) after compinit, or save as _allot
# in a folder of $fpath.
typeset -gA _allot_words _allot_options _allot_valued _allot_files _allot_choices \
    _allot_posfiles
{tables}

_allot() {{
    local cur=${{words[CURRENT]}} prev=${{words[CURRENT-1]}} cmd=_ w skip= i
    for (( i = 2; i < CURRENT; i++ )); do
        w=${{words[i]}}
        if [[ -n $skip ]]; then skip=; continue; fi
        if [[ $w == -* ]]; then
            [[ $w != *=* && " ${{_allot_valued[$cmd]}} " == *" $w "* ]] && skip=1
            continue
        fi
        [[ " ${{_allot_words[$cmd]}} " == *" $w "* && -n ${{_allot_options[$cmd $w]+x}} ]] \
            && cmd="$cmd $w"
    done
    if (( ${{+_allot_choices[$cmd $prev]}} )); then
        compadd -- ${{=_allot_choices[$cmd $prev]}}
    elif [[ " ${{_allot_files[$cmd]}} " == *" $prev "* ]]; then
        _files
    elif [[ " ${{_allot_valued[$cmd]}} " == *" $prev "* ]]; then
        return 0
    elif [[ $cur == -* ]]; then
        compadd -- ${{=_allot_options[$cmd]}}
    elif [[ -n ${{_allot_words[$cmd]}} ]]; then
        compadd -- ${{=_allot_words[$cmd]}}
    elif [[ -n ${{_allot_posfiles[$cmd]}} ]]; then
        _files
    fi
}}

if [[ ${{zsh_eval_context[-1]}} == loadautofunc ]]; then
    _allot "$@"
else
    compdef _allot allot
fi
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` (bash or zsh)."""
    tables = _tables(parser)
    if shell == "bash":
        text = "\n".join("declare -gA " + _assoc(f"_allot_{name}", values, '"')
                         for name, values in tables.items())
        return BASH.format(tables=text)
    text = "\n".join(_assoc(f"_allot_{name}", values, "'") for name, values in tables.items())
    return ZSH.format(tables=text)
