"""Shell completion for `kbroker`, generated from its own argument parser.

`kbroker completion bash|zsh|fish` prints a script that completes the commands, their
subcommands and their options, so the script always matches the parser it came from:
    source <(kbroker completion bash)        # ~/.bashrc
    source <(kbroker completion zsh)         # ~/.zshrc
    kbroker completion fish | source         # ~/.config/fish/config.fish
"""

from __future__ import annotations

import argparse
import shlex


def command_tree(parser: argparse.ArgumentParser) -> dict[str, tuple[list[str], list[str]]]:
    """Each command path ("" for the top, "topics describe", ...) to its subcommands and
    its options."""
    tree: dict[str, tuple[list[str], list[str]]] = {}

    def walk(path: str, p: argparse.ArgumentParser) -> None:
        children: list[str] = []
        options: list[str] = []
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    children.append(name)
                    walk(f"{path} {name}".strip(), child)
            else:
                options.extend(o for o in action.option_strings if o.startswith("--"))
        tree[path] = (children, options)

    walk("", parser)
    return tree


def _bash(tree: dict[str, tuple[list[str], list[str]]]) -> str:
    cases = []
    for path, (children, options) in sorted(tree.items()):
        words = " ".join(children + options)
        cases.append(f"        {shlex.quote(path)}) words={shlex.quote(words)} ;;")
    children_cases = []
    for path, (children, _) in sorted(tree.items()):
        if children:
            children_cases.append(
                f"        {shlex.quote(path)}) subs={shlex.quote(' '.join(children))} ;;"
            )
    return f"""# bash completion for kbroker (kbroker completion bash)
_kbroker() {{
    local cur path="" subs words i w
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        subs=""
        case "$path" in
{chr(10).join(children_cases)}
        esac
        if [[ " $subs " == *" $w "* ]]; then
            path="${{path:+$path }}$w"
        fi
    done
    words=""
    case "$path" in
{chr(10).join(cases)}
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _kbroker kbroker
"""


def _zsh(tree: dict[str, tuple[list[str], list[str]]]) -> str:
    return "# zsh completion for kbroker (kbroker completion zsh)\n" + (
        "autoload -U +X bashcompinit && bashcompinit\n" + _bash(tree).split("\n", 1)[1]
    )


def _fish(tree: dict[str, tuple[list[str], list[str]]]) -> str:
    lines = ["# fish completion for kbroker (kbroker completion fish)", "complete -c kbroker -f"]
    for path, (children, options) in sorted(tree.items()):
        words = path.split()
        if not words:
            condition = "__fish_use_subcommand"
        else:
            seen = " ".join(f"; and __fish_seen_subcommand_from {w}" for w in words)
            condition = f"true{seen}"
            if children:
                condition += f"; and not __fish_seen_subcommand_from {' '.join(children)}"
        for child in children:
            lines.append(f"complete -c kbroker -n {shlex.quote(condition)} -a {child}")
        for option in options:
            lines.append(f"complete -c kbroker -n {shlex.quote(condition)} -l {option[2:]}")
    return "\n".join(lines) + "\n"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    tree = command_tree(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](tree)
